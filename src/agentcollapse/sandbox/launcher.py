"""The grader's side (:class:`Sandbox`): starts the runner (``child.py``) in a new session with the
request and the test inputs, reads its results as they arrive and kills its process group at the end."""

from __future__ import annotations

import collections
import functools
import logging
import marshal
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict

# Relative imports: the package is the standard library and itself, so it loads from its folder alone
# (tests run it as an ordinary user who cannot read the project's environment).
from .child import _CHILD_ENV, OK, SKIPPED
from .limits import LAYERS, MODES, SANDBOX_ERROR, Check, Limits, SandboxUnavailable, TestRun

log = logging.getLogger("agentcollapse.sandbox")

_HOW_TO_GET = {"seccomp": "libseccomp2 (apt-get install libseccomp2) and pyseccomp (make venv)"}
STARTED: collections.deque[int] = collections.deque(maxlen=100_000)
"""Pids of the runners this process started (each is its process group; as root its candidates' uid is
``_UID_BASE`` + it): what a check for leftover processes looks for."""


@functools.cache
def _child_source() -> str:
    """The runner's script: ``child.py``, whole."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py"), encoding="utf-8") as f:
        return f.read()


# The syscall filter (seccomp, issue 58 item 5): what a Python program that reads input and prints
# has no use for and what widens the kernel's attack surface, denied with EPERM. A deny list over the
# allow list that a default-deny filter needs, because programs may use any of the standard library (threads,
# subprocesses, mmap, select, AF_UNIX sockets): libseccomp compiles it; no BPF is written here.
_DENIED_SYSCALLS = (
    # namespaces and mounts: a nested user namespace would give capabilities over new mounts and networks
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount", "open_tree",
    "fsopen", "fsconfig", "fsmount", "fspick",
    # kernel keyrings: keys outlive the run and are shared by a uid (item 4)
    "keyctl", "add_key", "request_key",
    # memory outside RLIMIT_AS (item 3): SysV shared memory, message queues, semaphores; memfds
    "shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop",
    "semctl", "ipc", "memfd_create", "memfd_secret",
    # large or privileged kernel interfaces
    "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd", "perf_event_open", "bpf",
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
    "swapoff", "syslog", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "sethostname", "setdomainname", "iopl", "ioperm", "quotactl", "quotactl_fd", "lookup_dcookie",
    "name_to_handle_at", "open_by_handle_at", "fanotify_init", "vhangup", "uselib", "personality",
    "mbind", "set_mempolicy", "migrate_pages", "move_pages",
)  # fmt: skip
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (clone's low byte is its exit signal,
# so CLONE_NEWTIME, 0x80, exists only for unshare and clone3, both denied)
_CLONE_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
_AF_UNIX = 1


@functools.cache
def seccomp_filter() -> bytes | None:
    """The filter as BPF (compiled once by libseccomp through ``pyseccomp``; each candidate loads the
    bytes with one prctl), or None where libseccomp is missing. Denied: ``_DENIED_SYSCALLS``; clone
    with a namespace flag; clone3 (ENOSYS, so the C library falls back to clone, whose flags the
    filter can see); sockets and socket pairs of any family but AF_UNIX (no network of any kind:
    netlink, vsock, packet, ...)."""
    import errno

    try:
        import pyseccomp as sc
    except (ImportError, RuntimeError, OSError) as exc:  # the binding, or libseccomp.so.2, missing
        log.debug("seccomp unavailable: %s", exc)
        return None
    filt = sc.SyscallFilter(sc.ALLOW)
    for name in _DENIED_SYSCALLS:
        if sc.resolve_syscall(sc.Arch.NATIVE, name) != -1:  # -1: unknown to this libseccomp or arch
            filt.add_rule(sc.ERRNO(errno.EPERM), name)
    for flag in _CLONE_NAMESPACE_FLAGS:  # rules for one call are OR'd: any namespace flag denies
        filt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for name in ("socket", "socketpair"):
        filt.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), name, sc.Arg(0, sc.NE, _AF_UNIX))
    with tempfile.TemporaryFile() as f:
        filt.export_bpf(f)
        f.seek(0)
        return f.read()


def _base_python() -> str:
    """The base interpreter (not a venv's): started with -I -S it imports the standard library only."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


class Sandbox:
    """Runs programs contained; ``run`` one program on many inputs, ``run_many`` a batch in parallel."""

    def __init__(
        self, mode: str = "strict", limits: Limits | None = None, workers: int = 2, namespaces: bool = True, seccomp: bool = True
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"sandbox mode {mode!r} must be one of {', '.join(MODES)}")
        self.mode = mode
        self.limits = limits or Limits()
        self.limits.validate()
        if int(workers) < 1:
            raise ValueError(f"sandbox workers={workers!r} must be at least 1")
        self.workers = int(workers)
        self.python = _base_python()
        self.namespaces = bool(namespaces)  # False: never try them (what a machine without them gets; for tests)
        self.seccomp = bool(seccomp)  # False: no syscall filter (what a machine without libseccomp gets; for tests)
        self.layers: dict[str, bool] = {}
        self._warned = False
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    # -- probing ------------------------------------------------------------------------------
    def probe(self) -> dict[str, bool]:
        """Which layers hold here (one trivial run); strict mode raises SandboxUnavailable when any is missing."""
        if not self.layers:
            (run,) = self.run("print(1)", [""])
            if not self.layers:  # the runner did not get as far as reporting
                self._note_layers({})
            if run.status != OK or run.stdout != "1\n":
                raise SandboxUnavailable(f"sandbox: a trivial program did not run ({run.status}: {run.stderr.strip()[-200:]})")
        return dict(self.layers)

    def missing(self) -> list[str]:
        return [name for name in LAYERS if not self.layers.get(name, False)]

    def _note_layers(self, layers: dict[str, bool]) -> None:
        with self._lock:
            self.layers = {name: bool(layers.get(name, False)) for name in LAYERS}
            missing = self.missing()
            if missing and self.mode == "strict":
                needs = "".join(f"; {name} needs {_HOW_TO_GET[name]}" for name in missing if name in _HOW_TO_GET)
                raise SandboxUnavailable(
                    f"sandbox: this machine lacks {', '.join(missing)}{needs} (env.kwargs.sandbox=best_effort runs without)"
                )
            if missing and not self._warned:
                self._warned = True
                log.warning("sandbox: running without %s on this machine (env.kwargs.sandbox=strict refuses to)", ", ".join(missing))

    # -- running ------------------------------------------------------------------------------
    def run(
        self, code: str, inputs: Sequence[str], call: str | None = None, stop_early: bool = False, check: Check | None = None
    ) -> list[TestRun]:
        """Run ``code`` once per input. ``call=None``: the input is stdin, the output is stdout.
        ``call="f"``: each input is a JSON list of arguments and the output is ``json.dumps(f(*args))``.
        ``stop_early``: after a run that failed whatever its output (error, timeout, output limit), or
        that ``check(i, run)`` (called here, in the grader, as each result arrives) rejects, the
        remaining inputs are ``skipped``: all-or-nothing grading needs no more."""
        inputs = list(inputs)
        if not inputs:
            return []
        lim = self.limits
        # The inputs follow the request as raw bytes: the harness moves each into its test's stdin with
        # splice(2) just before the test, so no process of the run ever holds another test's input.
        data = [text.encode("utf-8", "replace") for text in inputs]
        request = {
            "code": code,
            "sizes": [len(d) for d in data],
            "call": call,
            "limits": asdict(lim),
            "strict": self.mode == "strict",
            "stop_early": bool(stop_early),
            "namespaces": self.namespaces,
            "seccomp": seccomp_filter() if self.seccomp else None,
        }
        started = time.monotonic()
        # Every test may use its whole wall-clock budget; plus the start of the runner.
        deadline = started + len(inputs) * (lim.wall_seconds + 0.5) + 5.0
        cap = len(inputs) * (lim.output_bytes + 8 * 4096) + 65536
        records = _Records(self, len(inputs), check if stop_early else None)
        host_dir = tempfile.mkdtemp(prefix="agentcollapse-sandbox-")
        try:
            proc = subprocess.Popen(
                [self.python, "-I", "-S", "-B", "-c", _child_source(), host_dir],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=host_dir,
                env=dict(_CHILD_ENV),
                start_new_session=True,
                close_fds=True,
            )
            STARTED.append(proc.pid)
            try:
                header = marshal.dumps(request)
                _communicate(proc, len(header).to_bytes(8, "little") + header + b"".join(data), cap, deadline, records.feed)
            finally:
                _kill_group(proc)
        finally:
            _remove_tree(host_dir)
        per_test = (time.monotonic() - started) / len(inputs)
        missing = TestRun(SKIPPED, "", "not run: an earlier test failed") if records.rejected else None
        return [
            r if r is not None else missing or TestRun(SANDBOX_ERROR, "", "no result (killed or timed out)", per_test)
            for r in records.results
        ]

    def run_many(
        self, jobs: Sequence[tuple[str, Sequence[str], str | None]], stop_early: bool = False, checks: Sequence[Check | None] | None = None
    ) -> list[list[TestRun]]:
        """``run`` for each (code, inputs, call) (and its check), ``workers`` at a time (threads waiting on processes)."""
        checks = list(checks) if checks is not None else [None] * len(jobs)
        if self.workers == 1 or len(jobs) <= 1:
            return [self.run(code, inputs, call, stop_early, check) for (code, inputs, call), check in zip(jobs, checks)]
        futures = [self.submit(code, inputs, call, stop_early, check) for (code, inputs, call), check in zip(jobs, checks)]
        return [f.result() for f in futures]

    def submit(
        self, code: str, inputs: Sequence[str], call: str | None = None, stop_early: bool = False, check: Check | None = None
    ) -> Future[list[TestRun]]:
        """``run`` in the background: queued on the sandbox's ``workers`` threads (each waits on its
        runner process, so the caller's thread, e.g. a rollout decoding, goes on); the result is the
        future's. A run that raises hands its exception to ``result()``."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="sandbox")
            return self._pool.submit(self.run, code, list(inputs), call, stop_early, check)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class _Records:
    """The runner's answer, parsed as it arrives: ``L`` layers, ``F`` fatal, ``T`` one test's result
    (a header line, then its stdout and stderr bytes)."""

    def __init__(self, sandbox: Sandbox, n: int, check: Check | None) -> None:
        self.sandbox, self.check = sandbox, check
        self.results: list[TestRun | None] = [None] * n
        self.buf = bytearray()
        self.rejected = False

    def feed(self, chunk: bytes) -> bool:
        """Take more output; True when reading can stop (a result the check rejects, or garbage)."""
        self.buf += chunk
        while True:
            end = self.buf.find(b"\n")
            if end < 0:
                return False
            kind, _, rest = bytes(self.buf[:end]).decode("utf-8", "replace").partition(" ")
            if kind == "T":
                try:
                    i, status, secs, n_out, n_err = rest.split()
                    k, a, b = int(i), int(n_out), int(n_err)
                except ValueError:
                    return True
                if len(self.buf) < end + 1 + a + b:
                    return False  # the payload is still coming
                body = bytes(self.buf[end + 1 : end + 1 + a + b])
                del self.buf[: end + 1 + a + b]
                if not 0 <= k < len(self.results):
                    return True
                run = TestRun(status, body[:a].decode("utf-8", "replace"), body[a:].decode("utf-8", "replace"), float(secs))
                self.results[k] = run
                if self.check is not None and status != SKIPPED and not (status == OK and self.check(k, run)):
                    self.rejected = True
                    return True
                continue
            del self.buf[: end + 1]
            if kind == "L":
                self.sandbox._note_layers({k: v == "1" for k, _, v in (item.partition("=") for item in rest.split())})
            elif kind == "F":
                unavailable, _, message = rest.partition(" ")
                if self.sandbox.mode == "strict" and unavailable == "1":
                    raise SandboxUnavailable(f"sandbox: {message} (env.kwargs.sandbox=best_effort runs without it)")
                log.warning("sandbox: %s", message)
            else:
                return True


def _communicate(proc: subprocess.Popen, request: bytes, cap: int, deadline: float, feed: Callable[[bytes], bool]) -> None:
    """Send the request as the runner takes it (it reads the inputs test by test, so a blocking write
    could wait on it while it waits on us to read its results); pass the runner's stdout to ``feed``
    until EOF, ``deadline``, ``cap`` bytes or ``feed`` says stop."""
    import selectors

    assert proc.stdin is not None and proc.stdout is not None
    total, sent = 0, 0
    fd, wfd = proc.stdout.fileno(), proc.stdin.fileno()
    os.set_blocking(wfd, False)
    view = memoryview(request)
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        sel.register(wfd, selectors.EVENT_WRITE)
        while total <= cap:
            left = deadline - time.monotonic()
            events = sel.select(timeout=left) if left > 0 else []
            if not events:
                return
            for key, _ in events:
                if key.fd == wfd:
                    try:
                        sent += os.write(wfd, view[sent : sent + 65536])
                    except BlockingIOError:
                        continue
                    except OSError:  # the runner is gone (or stopped early); its output says why
                        sent = len(view)
                    if sent >= len(view):
                        sel.unregister(wfd)
                        proc.stdin.close()
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    return
                total += len(chunk)
                if feed(chunk[: max(0, cap - total + len(chunk))]):
                    return


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for stream in (proc.stdout, proc.stdin):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
    proc.wait()


def _remove_tree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
