"""Rollouts that overlap the update (``rollout.max_staleness=S > 0``): a thread of their own decodes the
batches of the coming iterations on the rollout engine while the trainer updates.

The pipeline has a fixed lag. The batch that iteration ``s`` trains on is decoded from the weights of
version ``max(base, s - 1 - S)``, where version ``v`` is the policy after ``v`` iterations and ``base`` the
version the run started (or resumed) from. The update of iteration ``s`` runs on version ``s - 1``, so every
batch is exactly ``min(S, s - 1 - base)`` versions behind the update that trains on it: never more than S, and
no group has to be dropped as stale. Which weights decode which batch does not depend on timing, so a run
is as repeatable as a synchronous one (the engine's per-request seeds give the same tokens in any order).

The trainer ``publish``es each version's weights after its update; the producer loads the version a batch
needs just before decoding it, between requests (weights never change under a request in flight). Other
users of the engine (evaluation, the MI proxy through the engine) take ``lock`` and the weights they need;
the producer reloads its own version when it next decodes. Resuming starts a new producer at the resumed
version: the batches that were in flight are decoded again, from the resumed weights (staleness below S for
the first S iterations after a resume)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

Weights = TypeVar("Weights")


def behind(step: int, version: int) -> int:
    """How many versions the update of iteration ``step`` (which runs on version ``step - 1``) is ahead of
    the weights ``version`` its batch was decoded from."""
    return step - 1 - version


def decoding_version(step: int, base: int, max_staleness: int) -> int:
    """The version whose weights decode iteration ``step``'s batch: ``max_staleness`` behind its update,
    never before the version the producer started from."""
    return max(base, step - 1 - max_staleness)


@dataclass
class Produced:
    """One iteration's batch, as the producer decoded it."""

    step: int
    version: int  # the weights' version it was decoded from
    batch: Any
    perf: dict[str, float]


class _Stop(Exception):
    """The producer was closed while it waited."""


class RolloutProducer(Generic[Weights]):
    """Decodes iterations ``base + 1 .. last`` in order on a daemon thread.

    ``load(version, weights)`` puts a published version's weights into the engine; ``decode(step)`` returns
    ``(batch, perf)`` for iteration ``step`` from whatever the engine serves. Both run on the producer's
    thread, under ``lock``. An exception in either reaches the trainer from ``take``."""

    def __init__(
        self,
        decode: Callable[[int], tuple[Any, dict[str, float]]],
        load: Callable[[int, Weights], None],
        base: int,
        last: int,
        max_staleness: int,
        base_weights: Weights,
    ) -> None:
        if max_staleness < 1:
            raise ValueError(f"max_staleness={max_staleness}: a producer runs ahead by at least one iteration")
        self.decode, self.load = decode, load
        self.base, self.last, self.max_staleness = base, last, max_staleness
        self.lock = threading.Lock()  # held while the engine decodes or loads; other users take it too
        self.loaded: int | None = None  # the version the engine serves (None: unknown, e.g. another user loaded its own)
        self._published: dict[int, Weights] = {base: base_weights}
        self._changed = threading.Condition()
        self._closed = False
        self._out: queue.Queue[Produced | BaseException] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="rollout-producer", daemon=True)
        self._thread.start()

    # -- the trainer's side --------------------------------------------------------------------
    def needs(self, version: int) -> bool:
        """Whether some batch still to be decoded needs ``version``'s weights (the last S versions are never
        decoded from: publishing them would only hold memory)."""
        return version <= decoding_version(self.last, self.base, self.max_staleness)

    def publish(self, version: int, weights: Weights) -> None:
        """Version ``version``'s weights (the trainer's after ``version`` iterations), for the batches it decodes."""
        with self._changed:
            self._published[version] = weights
            self._changed.notify_all()

    def take(self, step: int) -> Produced:
        """Iteration ``step``'s batch, waiting for it if it is still decoding."""
        item = self._out.get()
        if isinstance(item, BaseException):
            raise item
        if item.step != step:  # the trainer and the producer count iterations alike: a mismatch is a bug
            raise RuntimeError(f"the rollout producer decoded iteration {item.step} where the trainer is at {step}")
        return item

    def serves(self, version: int | None) -> None:
        """Another user of the engine (holding ``lock``) loaded ``version`` (None: weights of no version)."""
        self.loaded = version

    def close(self) -> None:
        """Stop after the request in flight (a request is not interrupted) and wait for the thread."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._thread.join()

    # -- the producer's thread -----------------------------------------------------------------
    def _weights(self, version: int) -> Weights:
        with self._changed:
            self._changed.wait_for(lambda: self._closed or version in self._published)
            if self._closed:
                raise _Stop
            for old in [v for v in self._published if v < version]:  # no later batch decodes from an older one
                del self._published[old]
            return self._published[version]

    def _run(self) -> None:
        try:
            for step in range(self.base + 1, self.last + 1):
                version = decoding_version(step, self.base, self.max_staleness)
                weights = self._weights(version)
                with self.lock:
                    if self._closed:
                        return
                    if self.loaded != version:
                        self.load(version, weights)
                        self.loaded = version
                    batch, perf = self.decode(step)
                self._out.put(Produced(step, version, batch, perf))
        except _Stop:
            return
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer's thread by take()
            self._out.put(exc)
