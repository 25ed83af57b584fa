"""Run untrusted Python (a policy's program) against test inputs, contained.

A service any env may use (DeepCoder grades with it). Pure standard library, no torch, nothing from
the rest of the package (its modules import each other relatively, so the folder loads on its own), and
``child.py`` is also the runner's script (``python -I -S -c <child.py>``).

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
  (beyond: killed) into buffers it wipes after each test (``child._Buffers``). /work is a new tmpfs after a test that left anything: a test finds nothing an earlier one left.

The harness kills each candidate at its wall-clock limit and then every other process of the
namespace (``kill(-1)`` as its init); when it exits the kernel kills whatever is left in the PID
namespace. A candidate's ``os.kill(os.getppid(), SIGKILL)`` hits that init, which the kernel protects
from signals sent inside its namespace. The grader kills the runner's whole process group at the end.

Layers (``Sandbox.layers``): ``rlimits``, ``session``, ``clean_env`` always; ``pid_namespace``,
``net_namespace``, ``mount_namespace`` (private read-only root, /work the only writable place) where
the kernel allows them; ``unprivileged`` (candidates run as a uid that RLIMIT_NPROC binds and that
owns nothing outside); ``seccomp`` (libseccomp and pyseccomp present). ``mode="strict"`` (``env.kwargs.sandbox``) refuses to run without all of them; ``"best_effort"``
runs with what there is and says once which are missing.

Files: ``limits.py`` (layers, modes, limits, a test's result), ``launcher.py`` (the grader's side),
``child.py`` (the runner's script: the namespaces, the private root, the candidates), ``compare.py``
(the grader's comparison of outputs). README's "The sandbox" states the threat model.
"""

from __future__ import annotations

from .child import ERROR, OK, OUTPUT_LIMIT, SKIPPED, TIMEOUT
from .compare import outputs_match
from .launcher import STARTED, Sandbox, seccomp_filter
from .limits import LAYERS, MODES, SANDBOX_ERROR, BatchStats, Check, Limits, SandboxUnavailable, TestRun

__all__ = [
    "BatchStats",
    "Check",
    "ERROR",
    "LAYERS",
    "Limits",
    "MODES",
    "OK",
    "OUTPUT_LIMIT",
    "SANDBOX_ERROR",
    "SKIPPED",
    "STARTED",
    "Sandbox",
    "SandboxUnavailable",
    "TIMEOUT",
    "TestRun",
    "outputs_match",
    "seccomp_filter",
]
