"""Every seed of a run in one place: which maps it trains and is evaluated on, and which random
stream each trajectory samples from.

Seeds are pure functions of the run seed and the iteration counter, never of a global RNG, so a
resumed run, a benchmark that reproduces iteration 1 and a single-process run all draw the same
maps and tokens. The ranges never overlap:

- held-out evaluation maps: ``0 .. val_episodes - 1`` (below ``TRAIN_SEED_BASE``);
- training maps: from ``TRAIN_SEED_BASE``, ``RUN_SEED_STRIDE`` apart per run seed;
- warm-start demonstration maps: from ``WARM_START_SEED_BASE`` (see ``models.tiny``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "MAX_RESAMPLE_ROUNDS",
    "RUN_SEED_STRIDE",
    "TRAIN_SEED_BASE",
    "VALIDATION_SAMPLE_SEED_BASE",
    "VALIDATION_SEED_BASE",
    "WARM_START_SEED_BASE",
    "capture_rng_state",
    "restore_rng_state",
    "rollout_sample_seed",
    "train_env_seeds",
    "trajectory_stream_seed",
    "turn_sample_seed",
    "validation_env_seeds",
    "validation_sample_seed",
    "warm_start_env_seed",
]

VALIDATION_SEED_BASE = 0
TRAIN_SEED_BASE = 1_000_000  # training maps; held-out validation maps use seeds below this
RUN_SEED_STRIDE = 10_000_000  # training maps of run seed s start at TRAIN_SEED_BASE + s * stride
WARM_START_SEED_BASE = 50_000_000  # demonstration maps never overlap training or held-out seeds
VALIDATION_SAMPLE_SEED_BASE = 12345
MAX_RESAMPLE_ROUNDS = 16  # dynamic sampling: extra rollouts per iteration at most
RESAMPLE_OFFSET = RUN_SEED_STRIDE // 2  # their maps: the second half of each run seed's range
RESAMPLE_STREAM_BASE = 2**40  # their sampling streams: far from every regular iteration's
_STREAM_MULTIPLIER = 1_000_003  # a prime, so (seed, index) pairs map to distinct streams


def train_env_seeds(run_seed: int, iteration: int, num_prompts: int, attempt: int = 0) -> list[int]:
    """The P training maps of ``iteration`` (0-based): the global batch, however many DDP ranks
    share its rollout (each decodes a block of it), so 1 and N processes train on the same maps.

    ``attempt`` > 0 numbers the extra rollouts of DAPO's dynamic sampling within the iteration; they
    draw from the second half of the run's seed range, so they never repeat a regular iteration's maps.
    """
    slot = iteration
    if attempt == 0:
        base = TRAIN_SEED_BASE + run_seed * RUN_SEED_STRIDE + slot * num_prompts
    else:
        if not 0 < attempt <= MAX_RESAMPLE_ROUNDS:
            raise ValueError(f"attempt must be in [0, {MAX_RESAMPLE_ROUNDS}], got {attempt}")
        base = TRAIN_SEED_BASE + run_seed * RUN_SEED_STRIDE + RESAMPLE_OFFSET + (slot * MAX_RESAMPLE_ROUNDS + attempt - 1) * num_prompts
    return list(range(base, base + num_prompts))


def rollout_sample_seed(run_seed: int, iteration: int, attempt: int = 0) -> int:
    """The sampling seed of one iteration's training rollout (each trajectory derives its own stream
    from it and its index in the global batch, so the split across DDP ranks changes no token)."""
    seed = (run_seed * _STREAM_MULTIPLIER + iteration) * 101  # x101: the streams of earlier versions, kept
    return seed if attempt == 0 else RESAMPLE_STREAM_BASE + seed * (MAX_RESAMPLE_ROUNDS + 1) + attempt


def validation_env_seeds(episodes: int) -> list[int]:
    """The held-out maps: the same for every run, so runs are compared on the same problems."""
    return list(range(VALIDATION_SEED_BASE, VALIDATION_SEED_BASE + episodes))


def validation_sample_seed(run_seed: int) -> int:
    return VALIDATION_SAMPLE_SEED_BASE + run_seed


def trajectory_stream_seed(sample_seed: int, index: int) -> int:
    """The seed of trajectory ``index``'s own generator: the same whatever batch it is decoded in."""
    return (sample_seed * _STREAM_MULTIPLIER + index) % (2**63 - 1)


def turn_sample_seed(stream_seed: int, turn: int) -> int:
    """The vLLM engine's seed for turn ``turn`` (0-based) of the trajectory whose stream is ``stream_seed``:
    each request samples from its own generator, whatever else the engine batches with it."""
    return (stream_seed * _STREAM_MULTIPLIER + turn) % (2**63 - 1)


def warm_start_env_seed(warm_start_seed: int, episode: int) -> int:
    return WARM_START_SEED_BASE + warm_start_seed * _STREAM_MULTIPLIER + episode


def capture_rng_state() -> dict[str, Any]:
    """The global torch, numpy and Python random states, as a checkpoint stores them: plain types and
    tensors only, so ``torch.load(weights_only=True)`` can read them back."""
    import random

    import numpy as np
    import torch  # imported here: the config layer imports this module and must stay light

    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": str(np_state[0]),
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": random.getstate(),
    }


def restore_rng_state(rng: dict[str, Any]) -> None:
    """Set the global random states from :func:`capture_rng_state`'s dict (or an older checkpoint's,
    which pickled numpy's state tuple as is and had no Python state)."""
    import random

    import numpy as np
    import torch

    torch.set_rng_state(rng["torch"])
    np_state = rng["numpy"]
    if isinstance(np_state, dict):
        keys = np_state["keys"].numpy().astype(np.uint32)
        np.random.set_state((np_state["name"], keys, np_state["pos"], np_state["has_gauss"], np_state["cached_gaussian"]))
    else:
        np.random.set_state(np_state)
    if "python" in rng:
        version, internal, gauss = rng["python"]
        random.setstate((version, tuple(internal), gauss))
