"""One progress style for long work: a live tqdm bar on a terminal, otherwise one plain line every few
percent (so ``make sweep > log`` stays readable instead of filling with ``\\r`` fragments)."""

from __future__ import annotations

import resource
import sys
import time
from typing import Any, TextIO

__all__ = ["Progress", "is_terminal", "peak_rss_mib"]


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def is_terminal(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


class Progress:
    """``with Progress(total, "warm start") as p: p.update(1, loss=0.3)``.

    ``every`` is the share of ``total`` between two plain lines (10% by default).
    """

    def __init__(self, total: int, desc: str, every: float = 0.1, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.total = max(1, int(total))
        self.desc = desc
        self.stream = stream or sys.stderr
        self.live = is_terminal(self.stream) if live is None else live
        self.step_lines = max(1, round(self.total * every))
        self.done = 0
        self.started = time.perf_counter()
        self._bar: Any = None
        if self.live:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc=desc, leave=False, file=self.stream)

    def update(self, n: int = 1, **postfix: Any) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            if postfix:
                self._bar.set_postfix(**{k: _fmt(v) for k, v in postfix.items()})
            return
        if self.done % self.step_lines == 0 or self.done == self.total:
            elapsed = time.perf_counter() - self.started
            remaining = elapsed / self.done * (self.total - self.done)
            extra = "".join(f" {k}={_fmt(v)}" for k, v in postfix.items())
            print(
                f"{self.desc}: {self.done}/{self.total} ({100 * self.done / self.total:.0f}%){extra} "
                f"elapsed {elapsed:.0f}s, ~{remaining:.0f}s left",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)
