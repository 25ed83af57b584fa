"""What a sandbox promises and reports: its layers and modes, the limits of one test, one test's result."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

LAYERS = ("rlimits", "session", "clean_env", "pid_namespace", "net_namespace", "mount_namespace", "unprivileged", "seccomp")
MODES = ("strict", "best_effort")
SANDBOX_ERROR = "sandbox_error"  # no result came back (the statuses a run reports are the child's: child.py)


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
