"""Run untrusted Python (a policy's program) against test inputs, contained.

Pure standard library, no torch: this file is also the child's script (``python -I -S sandbox.py``),
so it imports nothing from the package.

Who holds what:

- The **grader** (this process, :class:`Sandbox`) holds the hidden expected outputs. They never leave
  it: the child gets the program and the test *inputs* only, and the grader compares the outputs it
  reads back (``grade``). A program can therefore pass only by printing the right outputs.
- The **runner** (``python -I -S`` of the base interpreter, a new session, an environment with nothing
  from the parent, stdin/stdout pipes only) unshares new mount, network, PID, IPC and UTS namespaces
  (as an ordinary user inside a new user namespace first), then forks
- the **harness**, PID 1 of the new PID namespace: it builds a private root on a tmpfs (read-only
  binds of /usr, /lib*, /bin and the Python installation; /dev/null, /dev/zero, /dev/urandom; a small
  writable tmpfs at /work; no /proc, no /etc, no home, no repository, no data), ``chroot``s into it
  and, for every test, moves the test's input from the request pipe into a memfd by splice(2) (no
  process of the run ever holds another test's input in memory) and forks
- a **candidate** process: its own rlimits (CPU seconds, address space, file size, open files,
  processes, no core dumps), ``no_new_privs``, the syscall filter (``seccomp_filter``), run as a
  fresh unprivileged uid when the grader is root (the kernel does not enforce RLIMIT_NPROC for uid
  0), stdin from that memfd, stdout/stderr to pipes the harness reads at most ``output_bytes`` from
  (beyond: killed) into buffers it wipes after each test (``_Buffers``). /work is a new tmpfs after a test that left anything: a test finds nothing an earlier one left.

The harness kills each candidate at its wall-clock limit and then every other process of the
namespace (``kill(-1)`` as its init); when it exits the kernel kills whatever is left in the PID
namespace. A candidate's ``os.kill(os.getppid(), SIGKILL)`` hits that init, which the kernel protects
from signals sent inside its namespace. The grader kills the runner's whole process group at the end.

Layers (``Sandbox.layers``): ``rlimits``, ``session``, ``clean_env`` always; ``pid_namespace``,
``net_namespace``, ``mount_namespace`` (private read-only root, /work the only writable place) where
the kernel allows them; ``unprivileged`` (candidates run as a uid that RLIMIT_NPROC binds and that
owns nothing outside); ``seccomp`` (libseccomp and pyseccomp present). ``mode="strict"`` (``env.kwargs.sandbox``) refuses to run without all of them; ``"best_effort"``
runs with what there is and says once which are missing.
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import marshal
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

log = logging.getLogger(__name__)

LAYERS = ("rlimits", "session", "clean_env", "pid_namespace", "net_namespace", "mount_namespace", "unprivileged", "seccomp")
_HOW_TO_GET = {"seccomp": "libseccomp2 (apt-get install libseccomp2) and pyseccomp (make venv)"}
MODES = ("strict", "best_effort")
STARTED: collections.deque[int] = collections.deque(maxlen=100_000)
"""Pids of the runners this process started (each is its process group; as root its candidates' uid is
``_UID_BASE`` + it): what a check for leftover processes looks for."""
SANDBOX_ERROR = "sandbox_error"  # no result came back (the statuses a run reports are in the child's part below)


Check = Callable[[int, "TestRun"], bool]
"""``check(i, run)``: whether test i's output is the expected one (the grader's comparison)."""


class SandboxUnavailable(RuntimeError):
    """A layer that ``mode="strict"`` requires could not be set up on this machine."""


@dataclass(frozen=True)
class Limits:
    cpu_seconds: float = 2.0  # CPU time per test (RLIMIT_CPU; SIGKILL one second later)
    wall_seconds: float = 4.0  # wall-clock time per test, then the candidate is killed
    memory_mb: int = 512  # address space of a candidate (RLIMIT_AS)
    output_bytes: int = 1 << 20  # stdout read per test; more and the candidate is killed
    processes: int = 8  # processes a candidate may have at once (RLIMIT_NPROC, when unprivileged)
    file_mb: int = 8  # largest file a candidate may write (RLIMIT_FSIZE)
    work_mb: int = 16  # size of the writable tmpfs at /work

    def validate(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"sandbox limit {name}={value!r} must be a positive number")


@dataclass(frozen=True)
class TestRun:
    status: str  # ok | error | timeout | output_limit | skipped (after a failed run, with stop_early) | sandbox_error
    stdout: str
    stderr: str = ""  # the tail, for a message
    seconds: float = 0.0


@dataclass
class BatchStats:
    programs: int = 0
    tests: int = 0
    seconds: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# The grader side
# ---------------------------------------------------------------------------------------------


@functools.cache
def _child_source() -> str:
    """The runner's script: the part of this file below its marker."""
    with open(os.path.abspath(__file__), encoding="utf-8") as f:
        text = f.read()
    return "from __future__ import annotations\n" + text[text.rindex(_CHILD_MARKER) :]  # the marker line, not this constant


_CHILD_MARKER = "# === the child's script ==="


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


# ---------------------------------------------------------------------------------------------
# Comparing outputs (in the grader)
# ---------------------------------------------------------------------------------------------


# A number as graders print one: digits with an optional sign, point and exponent. Python's float()
# also takes 'nan', 'inf', 'infinity' and '1_000', which no expected output means as a number.
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_REL_TOL = 1e-6  # for non-integer expected numbers only (as LiveCodeBench/TACO: printing precision varies)


def _tokens_match(got: str, want: str) -> bool:
    """One token: equal strings; or, where the expected token is a non-integer number (a point or an
    exponent), a finite number within 1e-6 of it (relative, absolute below 1). Integers, words, nan
    and inf are compared exactly: a tolerance there lets ``1000001`` pass for ``1000000`` and ``nan``
    for anything (every comparison with nan is false, so ``abs(nan - y) > tol`` never rejects)."""
    if got == want:
        return True
    if not (_NUMBER.fullmatch(want) and _NUMBER.fullmatch(got)) or not any(c in want for c in ".eE"):
        return False
    x, y = float(got), float(want)
    return math.isfinite(x) and math.isfinite(y) and abs(x - y) <= _REL_TOL * max(1.0, abs(y))


def _same_json(got: Any, want: Any) -> bool:
    """JSON values equal, with a bool never standing in for a number (``True == 1`` in Python) and a
    float never equal unless it is (``nan`` is equal to nothing)."""
    if isinstance(got, bool) or isinstance(want, bool):
        return type(got) is type(want) and got == want
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(_same_json(a, b) for a, b in zip(got, want))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(_same_json(got[k], want[k]) for k in want)
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        return got == want
    return type(got) is type(want) and got == want


def outputs_match(actual: str, expected: str, call: bool = False) -> bool:
    """Whether an output is the expected one, as the original graders (LiveCodeBench, TACO) judge it.
    stdin/stdout: the same lines (trailing spaces and trailing blank lines ignored), each the same
    whitespace-separated tokens, compared exactly except non-integer expected numbers (``_tokens_match``).
    A call: the JSON values are equal (``_same_json``)."""
    if call:  # APPS/TACO store a return value r as r or as [r]
        try:
            got, want = json.loads(actual), json.loads(expected)
        except ValueError:
            return False
        return _same_json(got, want) or (isinstance(want, list) and len(want) == 1 and _same_json(got, want[0]))
    a = [line.split() for line in actual.rstrip().splitlines()]
    e = [line.split() for line in expected.rstrip().splitlines()]
    return len(a) == len(e) and all(len(la) == len(le) and all(map(_tokens_match, la, le)) for la, le in zip(a, e))


# === the child's script ==========================================================================
# Everything below runs in the runner (``python -I -S -c <this part>``): the standard library's
# builtin modules only, no json (its import of ``re`` costs more than a test); the grader sends the
# request marshalled and reads results framed as ``T i status seconds n_out n_err\n`` + the bytes.
import marshal  # noqa: E402,F811
import os  # noqa: E402,F811
import sys  # noqa: E402,F811
import time  # noqa: E402,F811

# Statuses of one test run, as the harness reports them.
OK, ERROR, TIMEOUT, OUTPUT_LIMIT, SKIPPED = "ok", "error", "timeout", "output_limit", "skipped"
_CHILD_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "HOME": "/work"}
_UID_BASE = 3_000_000  # candidates run as uid _UID_BASE + the runner's pid (unique while it runs)
_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
_CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS = 1, 4, 38
_PR_CAPBSET_DROP, _PR_SET_SECUREBITS, _SECBIT_NOROOT_AND_LOCKED = 24, 28, 0x3
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_MNT_DETACH = 2
_SIGKILL, _SIGXCPU = 9, 24  # Linux's numbers (the signal module's import of enum costs more than a test)
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _read_exactly(n: int) -> bytes:
    parts = []
    while n > 0:
        chunk = os.read(0, n)
        if not chunk:
            raise EOFError("the request ended early")
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _take_input(size: int) -> int:
    """A memfd holding the next ``size`` bytes of our stdin, moved by splice(2) in the kernel: the
    input never enters this process's memory, so no later fork of it can find it there."""
    fd = os.memfd_create("input")
    while size > 0:
        moved = os.splice(0, fd, size)
        if moved <= 0:
            raise EOFError("the inputs ended early")
        size -= moved
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def _emit_layers(layers: dict[str, bool]) -> None:
    _write_all(("L " + " ".join(f"{k}={int(v)}" for k, v in layers.items()) + "\n").encode())


def _emit_fatal(message: str, unavailable: bool) -> None:
    _write_all(f"F {int(unavailable)} {' '.join(message.split())}\n".encode())


def _emit_result(i: int, status: str, seconds: float, out: bytes, err: bytes) -> None:
    _write_all(f"T {i} {status} {seconds:.4f} {len(out)} {len(err)}\n".encode() + out + err)


def _mount(libc: Any, src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)), f"mount {src} on {dst}")


def _ro_bind(libc: Any, src: str, dst: str) -> None:
    _mount(libc, src, dst, None, _MS_BIND | _MS_REC)
    keep = os.statvfs(dst).f_flag & (_MS_NOSUID | _MS_NODEV | _MS_NOEXEC)  # ST_* equal MS_* here
    _mount(libc, None, dst, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | keep)


def _private_root(libc: Any, root: str, work_mb: int) -> None:
    """A tmpfs at ``root`` with read-only binds of what Python needs, /dev/{null,zero,urandom} and a
    writable tmpfs at /work; the root itself read-only. The caller chroots into it."""
    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount(libc, "tmpfs", root, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=755")
    prefixes = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix)}
    sources = ["/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin"]
    sources += sorted(p for p in prefixes if not any(p == s or p.startswith(s + "/") for s in sources))
    for src in sources:
        if not os.path.lexists(src):
            continue
        dst = root + src
        if os.path.islink(src):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.symlink(os.readlink(src), dst)
        elif os.path.isdir(src):
            os.makedirs(dst, exist_ok=True)
            _ro_bind(libc, src, dst)
    os.makedirs(root + "/dev", exist_ok=True)
    for dev in ("null", "zero", "urandom"):
        if os.path.exists("/dev/" + dev):
            open(root + "/dev/" + dev, "w").close()
            _mount(libc, "/dev/" + dev, root + "/dev/" + dev, None, _MS_BIND)
    os.makedirs(root + "/work")
    _mount(libc, "tmpfs", root + "/work", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={int(work_mb)}m,mode=1777")
    _mount(libc, None, root, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _enter_root(libc: Any, root: str) -> None:
    """Make ``root`` the root: pivot_root and detach the old one (nothing of the host's tree stays
    reachable in this mount namespace), or chroot where pivot_root is refused."""
    os.chdir(root)
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is not None and libc.syscall(number, b".", b".") == 0:
        _check(libc.umount2(b".", _MNT_DETACH), "detach the old root")
    else:
        os.chroot(".")
    os.chdir("/")


def _seccomp_program(bpf: bytes | None) -> Any:
    """A ``struct sock_fprog`` (and the instructions it points to) for prctl(PR_SET_SECCOMP)."""
    if not bpf:
        return None
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    prog = SockFprog(len(bpf) // 8, bpf)  # 8 bytes an instruction; ``bpf`` stays alive with ``limits``
    return ctypes.byref(prog)


def _drop_capabilities(libc: Any) -> None:
    """No capabilities, now or after an exec (the uid 0 of a user namespace keeps none)."""
    import ctypes

    libc.prctl(_PR_SET_SECUREBITS, _SECBIT_NOROOT_AND_LOCKED, 0, 0, 0)
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    _check(libc.capset(header, data), "capset")


def _child_main(host_dir: str) -> None:
    """The runner: read the request, set up namespaces, fork the harness, wait for it."""
    libc = _libc()
    libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    # Exactly the request, read unbuffered: the inputs behind it stay in the pipe (``_take_input``).
    request = marshal.loads(_read_exactly(int.from_bytes(_read_exactly(8), "little")))
    strict = bool(request.get("strict"))
    layers = {"rlimits": True, "session": os.getsid(0) == os.getpid(), "clean_env": True, "seccomp": request.get("seccomp") is not None}
    root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWPID | _CLONE_NEWIPC | _CLONE_NEWUTS
    namespaces = False
    try:
        if not request.get("namespaces", True):
            raise OSError(0, "switched off (Sandbox(namespaces=False))")
        _check(libc.unshare(flags if root else flags | _CLONE_NEWUSER), "unshare")
        namespaces = True
        if not root:  # map our uid to 0 inside, so the harness may mount and chroot
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            with open("/proc/self/uid_map", "w") as f:
                f.write(f"0 {uid} 1")
            with open("/proc/self/gid_map", "w") as f:
                f.write(f"0 {gid} 1")
    except OSError as exc:
        if strict:
            _emit_fatal(f"cannot create namespaces ({exc}); needs root or unprivileged user namespaces", True)
            return
    layers["net_namespace"] = layers["pid_namespace"] = namespaces
    # The candidates' uid: a fresh one as root (RLIMIT_NPROC binds it, it owns nothing); an ordinary
    # user is unprivileged already (inside its user namespace, as uid 0 mapped to itself).
    run_uid = _UID_BASE + os.getpid() if root else None
    # Without a user namespace an ordinary user's candidate keeps all of the user's own access.
    layers["unprivileged"] = root or namespaces
    pid = os.fork()
    if pid == 0:
        try:
            _harness(libc, request, layers, host_dir, namespaces, run_uid, strict)
        except BaseException as exc:  # noqa: BLE001 (the harness must report, never hang)
            _emit_fatal(f"harness failed: {type(exc).__name__}: {exc}", False)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _harness(
    libc: Any, request: dict[str, Any], layers: dict[str, bool], host_dir: str, namespaces: bool, run_uid: int | None, strict: bool
) -> None:
    libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    limits = request["limits"]
    workdir = host_dir
    mounted = False
    if namespaces:
        try:
            _private_root(libc, host_dir, limits["work_mb"])
            _enter_root(libc, host_dir)
            workdir = "/work"
            mounted = True
        except OSError as exc:
            if strict:
                _emit_fatal(f"cannot build a private read-only root ({exc})", True)
                return
    layers["mount_namespace"] = mounted
    os.chdir(workdir)
    if run_uid is not None and not mounted:
        os.chown(workdir, run_uid, run_uid)
    _emit_layers(layers)
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    code, call = request["code"], request["call"]
    import io  # noqa: F401 (imported once here, not in every candidate)

    if call is not None:
        import json  # noqa: F401
    # Python handles SIGINT; the kernel delivers a signal from inside the namespace to its init only
    # when init handles it, so the default keeps a candidate's kill(1, SIGINT) from stopping us.
    libc.signal(2, 0)  # SIGINT, SIG_DFL
    limits = dict(limits, seccomp=_seccomp_program(request.get("seccomp")), strict=strict)
    buffers = _Buffers(int(limits["output_bytes"]))
    failed = False
    for i, size in enumerate(request["sizes"]):
        if failed:
            _emit_result(i, SKIPPED, 0.0, b"", b"")
            continue
        started = time.monotonic()
        # The input goes from the request pipe to the test's stdin in the kernel, and the outputs
        # into buffers wiped after each test: the next candidate, a fork of this process, finds
        # neither another test's input nor what an earlier test printed (issue 58, item 2).
        status = _run_one(libc, code, call, _take_input(size), limits, run_uid, buffers)
        if os.getpid() == 1:  # init of our PID namespace: nothing the candidate started survives the test
            try:
                os.kill(-1, _SIGKILL)
            except ProcessLookupError:
                pass
            _reap()
        buffers.emit(i, status, time.monotonic() - started)
        _fresh_workdir(libc, workdir, mounted, limits["work_mb"], run_uid)
        failed = bool(request.get("stop_early")) and status != OK


def _fresh_workdir(libc: Any, workdir: str, mounted: bool, work_mb: int, run_uid: int | None) -> None:
    """An empty working directory for the next test, so nothing a test wrote (its input) reaches the
    next: a new tmpfs at /work, or (without a mount namespace) the old one emptied. Most tests write
    nothing, and a mount costs milliseconds (the kernel waits out an RCU grace period): an empty /work stays."""
    if not os.listdir(workdir):
        return
    if mounted:
        os.chdir("/")
        _check(libc.umount2(workdir.encode(), _MNT_DETACH), "detach /work")
        _mount(libc, "tmpfs", workdir, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={int(work_mb)}m,mode=1777")
    else:
        for entry in os.listdir(workdir):
            try:
                _remove_path(os.path.join(workdir, entry))
            except OSError:  # what the candidate made undeletable for us stays (this layer is then weaker)
                pass
    os.chdir(workdir)


def _remove_path(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        for entry in os.listdir(path):
            _remove_path(os.path.join(path, entry))
        os.rmdir(path)
    else:
        os.unlink(path)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _run_one(libc: Any, code: str, call: str | None, stdin: int, limits: dict[str, Any], run_uid: int | None, buffers: _Buffers) -> str:
    import resource
    import select

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the candidate
        try:
            os.dup2(stdin, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.closerange(3, 1 << 16)
            cpu = max(1, int(limits["cpu_seconds"] + 0.999))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            mem = int(limits["memory_mb"]) << 20
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            resource.setrlimit(resource.RLIMIT_FSIZE, (int(limits["file_mb"]) << 20,) * 2)
            resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_NPROC, (int(limits["processes"]),) * 2)
            if run_uid is not None:
                os.setgroups([])
                os.setgid(run_uid)
                os.setuid(run_uid)
            elif os.geteuid() == 0:
                _drop_capabilities(libc)
            libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            if limits["seccomp"] is not None:  # last: the setup above uses calls it denies
                err = libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, limits["seccomp"], 0, 0)
                if err != 0 and limits["strict"]:
                    _check(err, "load the seccomp filter")
            os.environ.clear()
            os.environ.update(_CHILD_ENV)
        except BaseException as exc:  # noqa: BLE001
            os.write(2, f"sandbox setup failed: {exc}".encode())
            os._exit(97)
        try:
            _candidate(code, call)
        finally:  # whatever escapes the program's own handling is its error, never the harness's code running on
            os._exit(1)
    for fd in (stdin, out_w, err_w):
        os.close(fd)
    deadline = time.monotonic() + float(limits["wall_seconds"])
    cap = buffers.cap
    status = None
    wstatus = None
    # The candidate's exit ends the test, even while processes it started hold the pipes open.
    exited = os.pidfd_open(pid)
    poll = select.poll()
    for fd in (out_r, err_r, exited):
        poll.register(fd, select.POLLIN)
    while status is None and wstatus is None:
        left = deadline - time.monotonic()
        if left <= 0:
            status = TIMEOUT
            break
        for fd, _ in poll.poll(max(1, int(left * 1000))):
            if fd == exited:
                wstatus = os.waitpid(pid, 0)[1]
                continue
            if buffers.read(fd, fd == out_r):
                poll.unregister(fd)
            if buffers.n_out > cap:
                status = OUTPUT_LIMIT
    if status is None:  # exited: what it wrote before is in the pipes
        for fd in (out_r, err_r):  # a bounded drain: processes it started may write on
            os.set_blocking(fd, False)
            try:
                for _ in range(64):
                    if buffers.n_out > cap or buffers.read(fd, fd == out_r):
                        break
            except BlockingIOError:
                pass
        if buffers.n_out > cap:
            status = OUTPUT_LIMIT
    if wstatus is None:
        try:
            os.kill(pid, _SIGKILL)
        except ProcessLookupError:
            pass
        wstatus = os.waitpid(pid, 0)[1]
    os.close(exited)
    os.close(out_r)
    os.close(err_r)
    if status is None:
        if os.WIFSIGNALED(wstatus) and os.WTERMSIG(wstatus) in (_SIGXCPU, _SIGKILL):
            status = TIMEOUT
        elif os.WIFEXITED(wstatus) and os.WEXITSTATUS(wstatus) == 0:
            status = OK
        else:
            status = ERROR
    return status


class _Buffers:
    """A test's stdout and stderr, read straight into two buffers made once (``readv``: no bytes
    object ever holds them), sent from there and wiped after each test, so nothing a test printed
    stays in the harness's memory for the next candidate (a fork of it) to find."""

    _ERR_KEEP = 2048  # the tail of stderr reported (the traceback's last lines)

    def __init__(self, cap: int) -> None:
        import ctypes

        self.cap = cap
        self.out = bytearray(cap + 65536)
        self.err = bytearray(1 << 16)
        self.n_out = self.n_err = 0
        self._addr = {id(b): ctypes.addressof((ctypes.c_char * len(b)).from_buffer(b)) for b in (self.out, self.err)}
        self._memmove, self._memset = ctypes.memmove, ctypes.memset

    def read(self, fd: int, stdout: bool) -> bool:
        """One read from ``fd`` into its buffer; True at end of stream."""
        if stdout:
            n = os.readv(fd, [memoryview(self.out)[self.n_out :]]) if self.n_out < len(self.out) else 0
            self.n_out += n
            return n == 0
        if self.n_err > len(self.err) - 4096:  # keep the tail: move it to the front, in place
            keep = self._ERR_KEEP
            base = self._addr[id(self.err)]
            self._memmove(base, base + self.n_err - keep, keep)
            self.n_err = keep
        n = os.readv(fd, [memoryview(self.err)[self.n_err :]])
        self.n_err += n
        return n == 0

    def emit(self, i: int, status: str, seconds: float) -> None:
        """Send test i's record (``_emit_result``'s framing) from the buffers, then wipe them."""
        n_out = min(self.n_out, self.cap)
        err_from = max(0, self.n_err - self._ERR_KEEP)
        parts = [
            f"T {i} {status} {seconds:.4f} {n_out} {self.n_err - err_from}\n".encode(),
            memoryview(self.out)[:n_out],
            memoryview(self.err)[err_from : self.n_err],
        ]
        while parts:
            sent = os.writev(1, parts)
            while parts and sent >= len(parts[0]):
                sent -= len(parts[0])
                parts.pop(0)
            if parts and sent:
                parts[0] = parts[0][sent:]
        for buf, used in ((self.out, self.n_out), (self.err, self.n_err)):
            self._memset(self._addr[id(buf)], 0, min(used, len(buf)))
        self.n_out = self.n_err = 0


def _report(exc: BaseException) -> None:
    """The program's error on stderr, the last frames as a traceback prints them; without importing
    ``traceback`` (a candidate's uid may not read the standard library: best_effort without namespaces)."""
    lines, tb = [], exc.__traceback__.tb_next if exc.__traceback__ is not None else None  # from the program's frames on
    while tb is not None:
        lines.append(f'  File "{tb.tb_frame.f_code.co_filename}", line {tb.tb_lineno}, in {tb.tb_frame.f_code.co_name}\n')
        tb = tb.tb_next
    try:
        sys.stderr.write("Traceback (most recent call last):\n" + "".join(lines[-3:]) + f"{type(exc).__name__}: {exc}\n")
    except BaseException:  # noqa: BLE001 (a str() that raises: the exit status says enough)
        pass


def _candidate(code: str, call: str | None) -> None:
    """Run the program in this (forked, limited) process; never returns."""
    import io

    if call is not None:
        import json
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="replace")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="replace", write_through=True)
    exit_code = 0
    try:
        namespace: dict[str, Any] = {"__name__": "__main__" if call is None else "solution", "__builtins__": __builtins__}
        exec(compile(code, "solution.py", "exec"), namespace)
        if call is not None:
            args = json.loads(sys.stdin.read())
            fn = namespace.get(call)
            if fn is None and isinstance(namespace.get("Solution"), type):  # LeetCode style
                fn = getattr(namespace["Solution"](), call, None)
            if not callable(fn):
                raise NameError(f"the program defines no function {call!r}")
            result = fn(*args)
            sys.stdout.write(json.dumps(result))
    except SystemExit as exc:
        exit_code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # noqa: BLE001
        exit_code = 1
        _report(exc)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        exit_code = exit_code or 1
    os._exit(exit_code & 0xFF)


if __name__ == "__main__" and sys.argv[0] == "-c" and len(sys.argv) == 2:
    _child_main(sys.argv[1])
