"""RolloutProducer (rollout.max_staleness > 0) with a stand-in engine: which weights decode which
iteration, the bound, the trainer waiting for a batch, errors and closing. The producer with vLLM in a
real run: tests/cli/test_smollm2_cli.py."""

from __future__ import annotations

import threading
import time

import pytest

from agentcollapse.rollout.producer import RolloutProducer, behind, decoding_version


class Engine:
    """Serves one version's weights; a decode records the version it decoded from."""

    def __init__(self, decode_seconds: float = 0.0) -> None:
        self.serving: int | None = None
        self.loads: list[int] = []
        self.decoded: list[tuple[int, int]] = []  # (step, version served)
        self.decode_seconds = decode_seconds

    def load(self, version: int, weights: str) -> None:
        assert weights == f"w{version}"  # the published weights of that version, not another's
        self.serving = version
        self.loads.append(version)

    def decode(self, step: int):
        time.sleep(self.decode_seconds)
        self.decoded.append((step, self.serving))
        return f"batch{step}", {"perf/rollout_time_s": self.decode_seconds}


def train(producer: RolloutProducer, first: int, last: int, update_seconds: float = 0.0) -> list[tuple[int, int]]:
    """The trainer's loop: take iteration s's batch, 'update' (version s), publish it when still needed."""
    taken = []
    for step in range(first, last + 1):
        produced = producer.take(step)
        assert produced.batch == f"batch{step}"
        taken.append((step, produced.version))
        time.sleep(update_seconds)
        if producer.needs(step):
            producer.publish(step, f"w{step}")
    producer.close()
    return taken


@pytest.mark.parametrize("staleness", [1, 2, 3])
def test_every_batch_is_decoded_exactly_the_bound_behind_its_update(staleness):
    engine = Engine()
    producer = RolloutProducer(engine.decode, engine.load, base=0, last=8, max_staleness=staleness, base_weights="w0")
    taken = train(producer, 1, 8)
    assert [s for s, _ in taken] == list(range(1, 9))
    # iteration s updates version s - 1; its batch comes from version max(0, s - 1 - S)
    assert [behind(s, v) for s, v in taken] == [min(staleness, s - 1) for s in range(1, 9)]
    assert engine.decoded == taken  # the producer decoded each from the version it reports
    assert engine.loads == sorted(set(v for _, v in taken))  # one load per version, in order


def test_the_schedule_does_not_depend_on_timing():
    slow_update = Engine(decode_seconds=0.0)
    slow_decode = Engine(decode_seconds=0.02)
    a = train(RolloutProducer(slow_update.decode, slow_update.load, 0, 6, 1, "w0"), 1, 6, update_seconds=0.02)
    b = train(RolloutProducer(slow_decode.decode, slow_decode.load, 0, 6, 1, "w0"), 1, 6, update_seconds=0.0)
    assert a == b


def test_a_resumed_producer_starts_at_the_resumed_version():
    engine = Engine()
    producer = RolloutProducer(engine.decode, engine.load, base=5, last=9, max_staleness=2, base_weights="w5")
    taken = train(producer, 6, 9)
    # the batches in flight at the interruption are decoded again, from the resumed weights
    assert taken == [(6, 5), (7, 5), (8, 5), (9, 6)]
    assert [decoding_version(s, 5, 2) for s in range(6, 10)] == [5, 5, 5, 6]


def test_the_last_bound_versions_are_not_needed():
    producer = RolloutProducer(Engine().decode, Engine().load, base=0, last=5, max_staleness=2, base_weights="w0")
    assert [producer.needs(v) for v in range(6)] == [True, True, True, False, False, False]
    producer.close()


def test_it_runs_ahead_by_at_most_the_bound():
    engine = Engine()
    producer = RolloutProducer(engine.decode, engine.load, base=0, last=10, max_staleness=2, base_weights="w0")
    deadline = time.monotonic() + 30
    while len(engine.decoded) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # room for a fourth, which must not come: nothing published after version 0
    assert [s for s, _ in engine.decoded] == [1, 2, 3]  # the batches version 0 may decode (S=2 behind 1..3)
    producer.close()


@pytest.mark.parametrize("evaluated", [1, 2])
def test_after_another_user_of_the_engine_the_producer_loads_its_version_only_if_it_differs(evaluated):
    engine = Engine()
    producer = RolloutProducer(engine.decode, engine.load, base=0, last=3, max_staleness=1, base_weights="w0")
    assert producer.take(1).version == 0 and producer.take(2).version == 0
    with producer.lock:  # evaluation loads the trainer's weights meanwhile
        engine.load(evaluated, f"w{evaluated}")
        producer.serves(evaluated)
    producer.publish(1, "w1")
    assert producer.take(3).version == 1 and engine.decoded[-1] == (3, 1)
    assert engine.loads == ([0, 1] if evaluated == 1 else [0, 2, 1])  # version 1 served already: not loaded again
    producer.close()


def test_an_error_in_the_producer_reaches_the_trainer():
    def decode(step):
        if step == 2:
            raise RuntimeError("engine died")
        return f"batch{step}", {}

    producer = RolloutProducer(decode, lambda v, w: None, base=0, last=4, max_staleness=1, base_weights="w0")
    assert producer.take(1).batch == "batch1"
    with pytest.raises(RuntimeError, match="engine died"):
        producer.take(2)
    producer.close()


def test_closing_stops_a_producer_waiting_for_weights():
    producer = RolloutProducer(Engine().decode, Engine().load, base=0, last=100, max_staleness=1, base_weights="w0")
    producer.take(1)
    closer = threading.Thread(target=producer.close)
    closer.start()
    closer.join(timeout=5)
    assert not closer.is_alive()


def test_a_bound_below_one_is_no_producer():
    with pytest.raises(ValueError, match="max_staleness=0"):
        RolloutProducer(Engine().decode, Engine().load, base=0, last=3, max_staleness=0, base_weights="w0")


def test_gathering_and_selecting_groups_keep_each_trajectorys_version():
    from agentcollapse.rollout.batch import RolloutBatch, Trajectory

    a = RolloutBatch([Trajectory(group=p, env_seed=p, policy_version=3) for p in range(2) for _ in range(2)], 2, 2)
    b = RolloutBatch([Trajectory(group=0, env_seed=9, policy_version=4) for _ in range(2)], 1, 2)
    whole = RolloutBatch.concat([a, b])  # the ranks' blocks gathered
    assert [t.policy_version for t in whole.trajectories] == [3, 3, 3, 3, 4, 4]
    assert [t.policy_version for t in whole.select_groups([2, 0]).trajectories] == [4, 4, 3, 3]
