"""Our RL iteration against TRL's ``GRPOTrainer``, side by side, on the same model, task and sizes.

    make bench-trl [ARGS="--repeats 2 --steps 4 --threads 2 --max-minutes 12"]
    .venv/bin/python -m benchmarks.bench_trl [--models natural,49152,smollm2] [--repeats 2] [--steps 4] [overrides ...]

TRL (trl==1.16.0 and what it adds, ``requirements-trl.lock``, on the versions of ``requirements.lock``) is
in the project's own ``.venv`` since ``agentcollapse.integrations.trl`` (before 2026-12-05 this benchmark
built a ``.venv-trl`` of its own, with the same versions).

Both sides train the same single-turn task (Countdown prompts rendered by our chat template, the
same token ids), P x G completions per iteration (default 8 x 16 = 128), at most ``--max-new-tokens``
(40) each, with the same LoRA (r, alpha, dropout, target modules of ``model=tiny``, or as overridden: both sides), sampling at T=1,
on ``--threads`` torch threads:

* **ours**: ``agentcollapse train`` (the CLI, as ``benchmarks.bench_iteration``) with ``env=countdown``,
  ``model.path=<the model below>`` (``model=tiny``'s LoRA and dtype), GRPO defaults, the MI proxy
  on every step (``diagnostics.compute_freq=1``), no validation, no checkpoints. Per-phase times are
  the run's own ``perf/*`` metrics (``metrics.csv``).
* **TRL**: ``GRPOTrainer`` with ``GRPOConfig(use_cpu=True, bf16=False, num_generations=G,
  per_device_train_batch_size=P*G/4, gradient_accumulation_steps=4, max_completion_length=40,
  beta=<our algorithm.kl_coef>)`` (everything else TRL's defaults; ``--trl-beta``), ``peft_config`` = the same
  LoRA, and a reward function that
  scores each completion with our Countdown env exactly as our rollout does. One optimizer step =
  one generation batch of P x G = one iteration. Per-phase times come from wrapping the trainer's
  ``_generate`` (tokenize + ``generate`` + decode) and ``_generate_and_score_completions`` (plus
  the reference pass, rewards and advantages); the rest of the step is the loss, backward and optimizer step.
  Both sides run the same objective: GRPO's k3 KL term against the adapter-off model at our
  coefficient (0.001, RAGEN's), so both run a reference pass. TRL's own default is beta=0, no KL and no
  reference pass (``--trl-beta 0``: the comparison before 2026-12-03, when only our side paid for one).

The model: a freshly initialised Llama with ``model=tiny``'s body (hidden 128, 4 layers, 4 heads,
MLP 384, tied embeddings) and its word-level tokenizer built from the Countdown text as our warm start
builds it; no training is needed for a timing benchmark. ``--models`` picks the head: ``natural``
(that tokenizer's own vocabulary) and/or a size such as 49152 (SmolLM2's), filled with unused words.
To make both sides generate exactly ``max_new_tokens`` tokens, embedding dimension 0 is set to +2
for every token and to -2 for the tokens either side stops or pads at (``</s>``, ``</answer>``,
``<pad>``): with tied embeddings, after any other token their logits sit far below every other
token's (the residual stream's dimension 0 stays positive), so no completion ever stops early
(checked at build time, and each side's measured completion lengths are reported). The MI proxy
scores the reasoning before ``</think>``, which a fresh model would almost never write (1 token in
the vocabulary): ``--think-rate`` (default 0.04) raises ``</think>`` to that probability a token, so
most completions carry reasoning and the proxy does a trained policy's work (``--think-rate 0``: the
plain fresh model). Every op stays dense, so none of this changes a kernel's cost.

**smollm2** (in ``--models`` by default) is the real model: SmolLM2-135M-Instruct with its own BPE
tokenizer, chat template and 49,152-token head, warm-started on Countdown as ``model=smollm2-135m``
does it (built once and cached, ~3 min on 2 cores, before any timing), at its own sizes
``--smollm2-size`` (default P=4 x G=8, 64 new tokens: P=8 x G=16 costs minutes an iteration on
2 cores). Both sides load the same merged directory with ``model=smollm2-135m``'s LoRA (r 16, q/v) and
gradient checkpointing (both defaults); ours decodes with vLLM (``--smollm2-engine``, the faster engine
here: ``make bench-engines``) and runs its MI proxy's forwards in bf16 (``--smollm2-proxy-dtype``, faster
on this CPU; ``make bench-proxy`` measures what it moves), TRL with ``transformers`` ``generate`` in fp32. Nothing is suppressed:
the warm-started policy writes ``<think>``/``<answer>``, the same distribution on both sides.

**The smollm2 entry compares equal work** (since 2026-12-07; issue 64): with ``--smollm2-tokens budget``
(the default) every completion runs to the budget on both sides (ours ``rollout.min_new_tokens``, which
holds back EOS and ``</answer>`` as vLLM's ``min_tokens`` does; TRL ``generation_kwargs={"min_new_tokens":
budget}``, since it stops at EOS only), so both generate, score and train the same number of tokens
(``equal_tokens`` in the summary checks the measured lengths); ``free`` lets each stop where it stops (ours
at ``</answer>``, TRL at EOS: TRL then did ~20% more tokens). Both compute in ``--smollm2-dtype`` (bf16:
ours ``algorithm.update_dtype``, TRL ``bf16=True``, which also makes it generate in bf16). Ours runs twice
a round, the MI proxy every step (``ours``) and at its default cadence, every 5 (``ours_every5``, as a user
runs it), so a round is three runs of ``--smollm2-steps`` (6) iterations, and the smollm2 numbers are
**means** of iterations 2-6 (a median would drop the one in five that carries the proxy). Each phase is
also read as tokens/s and against this CPU's matmul limit: ``torch.matmul`` probed at SmolLM2's shapes
before and after the runs, and the time the phase's least work would take at those rates (see
``fair_summary``) over its measured time.

Runs alternate (ours, TRL; then TRL, ours; ...), ``--repeats`` pairs per model, each run
``--steps`` iterations of which the first (one-off costs) is discarded; medians over the rest.
Writes ``benchmarks/results/trl.json`` and ``trl.md`` (rewritten after every run, so a run cut short
still leaves its numbers). One pair of all three models takes ~20 minutes on 2 cores (two pairs: 2,312 s at 1a59e02, smollm2 23 min of it; the
49,152 head costs ~40 s an iteration on either side with ``--think-rate 0``). Not a test: numbers go in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    PHASES,
    ROOT,
    Benchmark,
    Results,
    linear_params,
    median,
    phase_lists,
    rounds_within,
    run,
    subprocess_env,
    timed_run_overrides,
    train_rows,
    turn_order,
)

SMOLLM2_VOCAB = 49152
CORPUS_EPISODES = 4000  # demonstration episodes whose words make the tokenizer (the warm start uses the same generator)
STOP_MARGIN = 2.0  # embedding dimension 0: +STOP_MARGIN for every token, minus it for the stop/pad tokens
ACCUMULATION = 4  # TRL: gradient_accumulation_steps of the config in the issue


SMOLLM2 = "smollm2"  # the real model's entry in --models (the rest are tiny-body heads)
# ours with the MI proxy at its default cadence (diagnostics.compute_freq=5), as a user runs it: the smollm2
# entry's third side, beside ours with the proxy every step ("ours") and TRL
EVERY5 = "ours_every5"


def sides(name: str) -> tuple[str, ...]:
    """The runs of one alternating round of an entry."""
    return ("ours", EVERY5, "trl") if name == SMOLLM2 else ("ours", "trl")


# -- the shared model ----------------------------------------------------------------------------
def model_overrides(name: str) -> list[str]:
    """The model config group each entry trains with (its LoRA, dtype, checkpointing, warm start)."""
    return ["model=smollm2-135m" if name == SMOLLM2 else "model=tiny"]


def base_config(overrides: list[str] | None = None) -> Any:
    from agentcollapse.run.checks import compose_run as compose

    return compose(["env=countdown", *(overrides or [])])


def stop_and_pad_ids(tokenizer: Any) -> list[int]:
    ids = {int(tokenizer.eos_token_id), int(tokenizer.pad_token_id), int(tokenizer.convert_tokens_to_ids("</answer>"))}
    return sorted(ids)


def build_model_dir(cfg: Any, vocab: int | None, path: Path, seed: int = 0, think_rate: float = 0.0) -> dict[str, Any]:
    """A fresh tiny Llama + our Countdown tokenizer (``vocab`` tokens, or its natural size) in ``path``."""
    import torch
    from transformers import LlamaForCausalLM

    from agentcollapse import envs
    from agentcollapse.models.tiny import demonstration_episodes, tiny_llama_config
    from agentcollapse.models.tokenizer import build_tokenizer

    ws = cfg.model.warm_start
    system_prompt, episodes = demonstration_episodes(cfg.env, CORPUS_EPISODES, ws.suboptimal_prob, ws.template_prob, ws.seed)
    env = envs.from_config(cfg.env)
    corpus = [system_prompt, *env.templates, "Turn Reward : - . \n"]
    corpus += [m["content"] for turns in episodes for messages, _ in turns for m in messages]
    corpus += [resp for turns in episodes for _, resp in turns]
    tokenizer = build_tokenizer(corpus)
    natural = len(tokenizer)
    if vocab is not None and vocab > natural:
        corpus.append(" ".join(f"zzunused{i:06d}" for i in range(vocab - natural)))
        tokenizer = build_tokenizer(corpus)
    if vocab is not None and len(tokenizer) != vocab:
        raise SystemExit(f"vocabulary {vocab} asked, tokenizer has {len(tokenizer)} (natural size {natural})")
    config = tiny_llama_config(cfg.model, tokenizer)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    banned = stop_and_pad_ids(tokenizer)
    with torch.no_grad():
        weight = model.get_input_embeddings().weight
        weight[:, 0] = STOP_MARGIN
        weight[banned, 0] = -STOP_MARGIN
    # Check: after a real prompt, and after every non-banned token of it, the banned tokens are never likely.
    from agentcollapse.models.context import encode, first_user_message, render_context

    obs = env.reset(1)
    text = render_context(
        tokenizer, [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": first_user_message(obs)}]
    )
    ids = encode(tokenizer, text)
    with torch.no_grad():
        probs = model(input_ids=torch.tensor([ids])).logits.softmax(-1)[0]
    free = [i for i, t in enumerate(ids) if t not in banned]  # the prompt itself holds a literal </answer>
    worst = float(probs[free][:, banned].max())
    if worst > 1e-6:
        raise SystemExit(f"stop tokens not suppressed (max probability {worst:.2g})")
    think_logit = None
    if think_rate > 0:  # raise </think> (never a stop token) to ~think_rate a step: the MI proxy gets reasoning to score
        think = int(tokenizer.convert_tokens_to_ids("</think>"))
        lo, hi = STOP_MARGIN, STOP_MARGIN + 20.0
        with torch.no_grad():
            for _ in range(30):
                weight[think, 0] = (lo + hi) / 2
                p = float(model(input_ids=torch.tensor([ids])).logits[0, -1].softmax(-1)[think])
                lo, hi = (weight[think, 0].item(), hi) if p < think_rate else (lo, weight[think, 0].item())
        think_logit = p
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    params = sum(p.numel() for p in model.parameters())
    return {
        "vocab": len(tokenizer),
        "natural_vocab": natural,
        "params": params,
        "max_banned_prob": worst,
        "banned_ids": banned,
        "think_close_prob": think_logit,
    }


def build_smollm2_dir(cfg: Any) -> dict[str, Any]:
    """The SmolLM2 policy warm-started on Countdown, as ``agentcollapse train model=smollm2-135m`` resolves
    it (built into the cache once, then reused); both sides load this directory."""
    from transformers import AutoModelForCausalLM

    from agentcollapse.models.policy import resolve_model_dir
    from agentcollapse.models.tiny import load_tokenizer

    path = resolve_model_dir(cfg.model, cfg.env, cfg.cache_dir)
    params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(str(path)).parameters())
    return {"path": str(path), "vocab": len(load_tokenizer(path)), "params": params}


def prompts_for(cfg: Any, tokenizer: Any, iterations: int, num_prompts: int) -> tuple[list[str], list[int]]:
    """The rendered first-turn contexts our trainer decodes from, iteration by iteration (same seeds)."""
    from agentcollapse import envs, seeds
    from agentcollapse.models.context import first_user_message, render_context

    texts, env_seeds = [], []
    env = envs.from_config(cfg.env)
    for it in range(iterations):
        for seed in seeds.train_env_seeds(cfg.seed, it, num_prompts):
            obs = env.reset(seed)
            messages = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": first_user_message(obs)}]
            texts.append(render_context(tokenizer, messages))
            env_seeds.append(seed)
    return texts, env_seeds


# -- our side --------------------------------------------------------------------------------------
def run_ours(model_dir: Path, args: argparse.Namespace, run_dir: Path, name: str, compute_freq: int = 1) -> dict[str, Any]:
    # SmolLM2 resolves its warm-started directory through the cache itself (the one build_smollm2_dir made)
    model = args.model_overrides + (
        [
            f"rollout.engine={args.smollm2_engine}",
            f"diagnostics.proxy_dtype={args.smollm2_proxy_dtype}",
            f"algorithm.update_dtype={args.smollm2_dtype}",
            *([f"rollout.min_new_tokens={args.max_new_tokens}"] if args.smollm2_tokens == "budget" else []),
        ]
        if name == SMOLLM2
        else [f"model.path={model_dir}"]
    )
    overrides = [
        "env=countdown",
        *model,
        f"rollout.num_prompts={args.prompts}",
        f"rollout.group_size={args.group}",
        f"rollout.max_new_tokens={args.max_new_tokens}",
        f"diagnostics.compute_freq={compute_freq}",
        *timed_run_overrides(args.steps, args.threads),
        *args.overrides,
    ]
    rows = train_rows(ROOT / "src", overrides, run_dir, args.threads)
    out: dict[str, Any] = phase_lists(rows)
    out["completion_length"] = out.pop("response_length")
    # what the MI proxy had to score: the share of responses with reasoning, first-turn traces kept
    out["valid_thinking_rate"] = rows["collapse/valid_thinking_rate"].tolist() if "collapse/valid_thinking_rate" in rows else []
    out["proxy_traces"] = rows["collapse/first_turn_num_valid"].tolist() if "collapse/first_turn_num_valid" in rows else []
    out["config"] = [*overrides, f"run_dir={run_dir}"]
    return out


# -- TRL's side (a worker process: python -m benchmarks.bench_trl --trl-worker ...) --------------------------
def trl_worker(args: argparse.Namespace) -> None:
    """One TRL run (a worker process): GRPOTrainer on our prompts and reward, its phases timed, the
    record written to ``--worker-out``."""
    import torch

    torch.set_num_threads(args.threads)
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from agentcollapse.models.context import encode

    trainer_class, collapse = GRPOTrainer, {}
    if args.collapse_freq >= 0:  # --collapse-cost: TRL with our diagnostics at that cadence
        from agentcollapse.config import DiagnosticsConfig
        from agentcollapse.integrations.trl import CollapseGRPOTrainer

        trainer_class, collapse = CollapseGRPOTrainer, {"collapse_diagnostics": DiagnosticsConfig(compute_freq=args.collapse_freq)}

    # our side's overrides too: a LoRA or seed changed for ours is TRL's as well
    cfg = base_config([*model_overrides(args.model_name), *args.overrides])
    model_dir = Path(args.trl_worker)
    tokenizer = trl_tokenizer(model_dir)
    texts, env_seeds = prompts_for(cfg, tokenizer, args.steps, args.prompts)
    if tokenizer(text=texts[:1])["input_ids"][0] != encode(tokenizer, texts[0]):
        raise SystemExit("TRL would tokenize the prompt differently from our rollout")
    trl_config = grpo_config_fields(args)
    lora = cfg.model.lora
    with tempfile.TemporaryDirectory() as tmp:
        config = GRPOConfig(
            output_dir=tmp,
            max_steps=args.steps,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            seed=cfg.seed,
            **trl_config,
        )
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
        trainer = trainer_class(
            model=model,
            reward_funcs=[make_countdown_reward(cfg, tokenizer)],
            args=config,
            train_dataset=Dataset.from_dict({"prompt": texts, "env_seed": env_seeds}),
            processing_class=tokenizer,
            peft_config=LoraConfig(
                r=lora.r,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=list(lora.target_modules),
                bias="none",
                task_type="CAUSAL_LM",
            ),
            **collapse,
        )
        record = record_phases(trainer)
        trainer.train()
    record["update"] = [s - p for s, p in zip(record["step"], record["prepare"], strict=True)]
    record["rewards_and_advantages"] = [p - r for p, r in zip(record["prepare"], record["rollout"], strict=True)]
    Path(args.worker_out).write_text(json.dumps({"record": record, "config": trl_config}))


def trl_tokenizer(model_dir: Path) -> Any:
    """The model's tokenizer set up as our policy loader sets it: a pad token, padding on the left."""
    from agentcollapse.models.tiny import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    if tokenizer.pad_token_id is None:  # as our policy loader does (SmolLM2 names no pad token)
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def make_countdown_reward(cfg: Any, tokenizer: Any) -> Any:
    """TRL's reward function: our rollout's reward, each completion's answer stepped in a fresh Countdown env."""
    from agentcollapse import envs
    from agentcollapse.envs.parsing import parse_response
    from agentcollapse.models.policy import Policy

    decoder = Policy(model=None, tokenizer=tokenizer)  # type: ignore[arg-type]

    def countdown_reward(completion_ids: list[list[int]], env_seed: list[int], **_: Any) -> list[float]:
        """Our rollout's reward: parse <think>/<answer>, step a fresh Countdown env on the answer."""
        rewards = []
        for ids, seed in zip(completion_ids, env_seed, strict=True):
            parsed = parse_response(decoder.response_text(ids))
            env = envs.from_config(cfg.env)
            env.reset(int(seed))
            rewards.append(env.step(parsed.answer if parsed.format_valid else "")[1])
        return rewards

    return countdown_reward


def grpo_config_fields(args: argparse.Namespace) -> dict[str, Any]:
    """GRPOConfig's fields for P x G completions per step in ``ACCUMULATION`` micro-batches, then ``--trl-arg``."""
    batch = args.prompts * args.group
    if batch % ACCUMULATION:
        raise SystemExit(f"P x G = {batch} must be a multiple of {ACCUMULATION} (TRL's gradient_accumulation_steps here)")
    trl_config: dict[str, Any] = {
        "use_cpu": True,
        "bf16": False,
        "num_generations": args.group,
        "per_device_train_batch_size": batch // ACCUMULATION,
        "gradient_accumulation_steps": ACCUMULATION,
        "max_completion_length": args.max_new_tokens,
    }
    if args.model_name == SMOLLM2:  # the same compute dtype and, with "budget", the same tokens as ours
        trl_config["bf16"] = args.smollm2_dtype == "bfloat16"
        if args.smollm2_tokens == "budget":  # EOS held back to the budget (TRL stops at nothing else)
            trl_config["generation_kwargs"] = {"min_new_tokens": args.max_new_tokens}
    for item in args.trl_arg:
        key, _, value = item.partition("=")
        trl_config[key] = json.loads(value)
    return trl_config


def record_phases(trainer: Any) -> dict[str, list[float]]:
    """Time the trainer's phases per step: its ``_generate`` (the rollout: tokenize, generate, decode) and
    ``_generate_and_score_completions`` (plus the reference pass, rewards and advantages) are wrapped,
    a callback closes each step. Returns the record the timings land in as the trainer runs."""
    from transformers import TrainerCallback

    record: dict[str, list[float]] = {
        k: [] for k in ("step", "interval", "rollout", "prepare", "completion_length", "prompt_length", "completions")
    }
    pending = {"rollout": 0.0, "prepare": 0.0}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            started = time.perf_counter()
            result = fn(*a, **kw)
            pending[name] += time.perf_counter() - started
            if name == "rollout":
                prompt_ids, completion_ids = result[0], result[1]
                record["completion_length"].append(statistics.fmean(len(c) for c in completion_ids))
                record["prompt_length"].append(statistics.fmean(len(p) for p in prompt_ids))
                record["completions"].append(len(completion_ids))
            return result

        return wrapper

    trainer._generate = timed("rollout", trainer._generate)
    trainer._generate_and_score_completions = timed("prepare", trainer._generate_and_score_completions)

    class StepTimes(TrainerCallback):
        def __init__(self) -> None:
            self.begin = self.last_end = time.perf_counter()

        def on_step_begin(self, *_: Any, **__: Any) -> None:
            self.begin = time.perf_counter()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            now = time.perf_counter()
            record["step"].append(now - self.begin)
            record["interval"].append(now - self.last_end)
            self.last_end = now
            record["rollout"].append(pending["rollout"])
            record["prepare"].append(pending["prepare"])
            pending["rollout"] = pending["prepare"] = 0.0

    trainer.add_callback(StepTimes())
    return record


def run_trl(model_dir: Path, args: argparse.Namespace, out_file: Path) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.bench_trl",
        "--trl-worker",
        str(model_dir),
        "--worker-out",
        str(out_file),
        *(
            f"--{k}={getattr(args, k.replace('-', '_'))}"
            for k in (
                "steps",
                "threads",
                "prompts",
                "group",
                "max-new-tokens",
                "model-name",
                "collapse-freq",
                "smollm2-tokens",
                "smollm2-dtype",
            )
        ),
        f"--trl-arg=beta={args.beta}",  # first: an explicit --trl-arg beta=... still wins
        *(f"--trl-arg={a}" for a in args.trl_arg),
        "--",
        *args.overrides,
    ]
    proc = subprocess.run(cmd, env=subprocess_env(ROOT / "src", args.threads), capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"TRL run failed:\n{proc.stderr[-3000:]}")
    data = json.loads(out_file.read_text())
    return {**data["record"], "config": data["config"]}


# -- the comparison ----------------------------------------------------------------------------------
def kept(runs: list[dict[str, Any]], key: str) -> list[float]:
    """Every run's values of ``key`` without its first iteration (the warm-up)."""
    return [v for run in runs for v in run.get(key, [])[1:]]


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "transformers", "peft", "accelerate", "trl", "lightning"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "missing"
    return out


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--models",
        "--vocabs",
        default=f"natural,{SMOLLM2_VOCAB},{SMOLLM2}",
        help=f"comma-separated: natural and/or vocabulary sizes (the tiny body), and/or {SMOLLM2} (the real model)",
    )
    ap.add_argument(
        "--smollm2-size",
        default="4x8x64",
        help="P x G x new tokens of the smollm2 entry (its own: P=8 x G=16 x 40 costs minutes an iteration on 2 cores)",
    )
    ap.add_argument("--smollm2-engine", default="vllm", choices=["vllm", "hf"], help="our rollout engine for smollm2")
    ap.add_argument(
        "--smollm2-tokens",
        default="budget",
        choices=["budget", "free"],
        help="budget: both sides run every smollm2 completion to the budget (ours rollout.min_new_tokens, TRL min_new_tokens), "
        "equal work; free: each stops where it stops (ours at </answer>, TRL only at EOS: the comparison before 2026-12-07)",
    )
    ap.add_argument(
        "--smollm2-dtype",
        default="bfloat16",
        choices=["bfloat16", "float32"],
        help="smollm2's compute dtype on both sides: ours algorithm.update_dtype, TRL bf16=True (which also generates in bf16)",
    )
    ap.add_argument(
        "--smollm2-steps",
        type=int,
        default=6,
        help="iterations per smollm2 run: 6 keeps iterations 2-6, one of which (step 5) carries the every-5 proxy",
    )
    ap.add_argument("--save-as", default="trl", help="name of the result files (<name>.json, <name>.md)")
    ap.add_argument(
        "--smollm2-proxy-dtype",
        default="bfloat16",
        choices=["float32", "bfloat16"],
        help="our MI proxy's forwards for smollm2 (diagnostics.proxy_dtype; bf16 is the faster here, bench_proxy gives its accuracy)",
    )
    ap.add_argument(
        "--trl-beta",
        default="matched",
        help="TRL's KL coefficient: 'matched' (default) = our algorithm.kl_coef, so both sides run the same objective and "
        "a reference pass; or a number (TRL's own default is 0: no reference pass)",
    )
    ap.add_argument("--steps", type=int, default=4, help="iterations per run (the first is discarded)")
    ap.add_argument("--prompts", type=int, default=8, help="P")
    ap.add_argument("--group", type=int, default=16, help="G")
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument(
        "--think-rate",
        type=float,
        default=0.04,
        help="probability of </think> per generated token, so most completions carry reasoning the MI proxy scores (0: ~1/vocab)",
    )
    ap.add_argument(
        "--max-minutes",
        type=float,
        default=0.0,
        help="start no pair that would end past this many minutes (estimated from the longest pair so far; 0: no limit)",
    )
    ap.add_argument("--trl-arg", action="append", default=[], help="extra GRPOConfig field, KEY=JSON (e.g. gradient_checkpointing=false)")
    ap.add_argument("--trl-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--model-name", default="natural", help=argparse.SUPPRESS)
    ap.add_argument(
        "--collapse-cost",
        action="store_true",
        help="instead of ours vs TRL: TRL's GRPOTrainer alone vs CollapseGRPOTrainer with the MI proxy every step and "
        "every 5 (alternating; means over iterations 2..--steps, so with --steps 6 one in five carries the every-5 proxy)",
    )
    ap.add_argument("--collapse-freq", type=int, default=-1, help=argparse.SUPPRESS)


def main(args: argparse.Namespace, save: Results) -> None:
    if args.trl_worker:
        trl_worker(args)
        return
    names = model_names(args)
    started = time.perf_counter()
    sizes = {name: entry_args(args, name) for name in names}
    if args.collapse_cost:
        collapse_cost(args, save, names, sizes, started)
        return
    with tempfile.TemporaryDirectory() as tmp:
        dirs, results = build_models(args, names, sizes, Path(tmp))
        if SMOLLM2 in names:  # the matmul limit at SmolLM2's shapes, probed before the runs and after them (best of each)
            results[SMOLLM2]["probe"] = probe_limit(results[SMOLLM2]["model"]["path"])
        for rep in rounds_within(args.repeats, args.max_minutes, started):
            for name in names:
                for side in turn_order(sides(name), rep, swap=True):
                    run_side(args, sizes, results, dirs, Path(tmp), name, side, rep)
                    write_report(args, save, sizes, results, started, final=False)  # a cut-short run still leaves its numbers
        if SMOLLM2 in names:
            results[SMOLLM2]["probe"] = probe_limit(results[SMOLLM2]["model"]["path"], results[SMOLLM2]["probe"])
    write_report(args, save, sizes, results, started, final=True)


def model_names(args: argparse.Namespace) -> list[str]:
    """The ``--models`` entries, checked (and ``--steps``, whose first iteration is discarded)."""
    if args.steps < 2:
        raise SystemExit("--steps must be >= 2 (the first iteration of each run is discarded)")
    names = [v.strip() for v in args.models.split(",") if v.strip()]
    for name in names:
        if name not in ("natural", SMOLLM2) and not name.isdigit():
            raise SystemExit(f"--models: {name!r} is not natural, {SMOLLM2} or a vocabulary size")
    return names


def build_models(
    args: argparse.Namespace, names: list[str], sizes: dict[str, argparse.Namespace], tmp: Path
) -> tuple[dict[str, Path], dict[str, dict[str, Any]]]:
    """Each entry's model directory (built before any timing) and its empty results."""
    cfg = base_config()
    dirs: dict[str, Path] = {}
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        if name == SMOLLM2:
            info = build_smollm2_dir(base_config(sizes[name].model_overrides))
            dirs[name] = Path(info["path"])
        else:
            dirs[name] = tmp / f"model-{name}"
            info = build_model_dir(cfg, None if name == "natural" else int(name), dirs[name], think_rate=args.think_rate)
        results[name] = {"model": info, **{side: [] for side in sides(name)}}
        print(f"model {name}: vocabulary {info['vocab']}, {info['params']:,} parameters", flush=True)
    return dirs, results


def run_side(
    args: argparse.Namespace,
    sizes: dict[str, argparse.Namespace],
    results: dict[str, dict[str, Any]],
    dirs: dict[str, Path],
    tmp: Path,
    name: str,
    side: str,
    rep: int,
) -> None:
    """One run of one side on one model, added to ``results``."""
    t0 = time.perf_counter()
    run_file = tmp / f"{side}-{name}-{rep}"
    run = (
        run_trl(dirs[name], sizes[name], run_file.with_suffix(".json"))
        if side == "trl"
        else run_ours(dirs[name], sizes[name], run_file, name, compute_freq=5 if side == EVERY5 else 1)
    )
    results[name][side].append(run)
    print(
        f"[{name}] {side} run {rep + 1}/{args.repeats}: {time.perf_counter() - t0:.0f}s wall, "
        f"iterations {', '.join(f'{s:.2f}' for s in run['step'])} s",
        flush=True,
    )


def entry_args(args: argparse.Namespace, name: str) -> argparse.Namespace:
    """``args`` with one model's P, G and new tokens (the smollm2 entry has its own), its name, its model
    overrides and its LoRA (composed once here, not at every report)."""
    out = argparse.Namespace(**vars(args))
    out.model_name = name
    out.model_overrides = model_overrides(name)
    cfg = base_config([*out.model_overrides, *args.overrides])  # what our side trains (the TRL worker composes the same)
    out.lora = {k: getattr(cfg.model.lora, k) for k in ("r", "alpha", "dropout", "target_modules")}
    # the same objective on both sides by default: TRL's k3 KL term (adapter off, as ours) at our coefficient
    out.kl_coef = cfg.algorithm.kl_coef
    try:
        out.beta = out.kl_coef if args.trl_beta == "matched" else float(args.trl_beta)
    except ValueError:
        raise SystemExit(f"--trl-beta {args.trl_beta!r}: expected 'matched' or a number") from None
    if name == SMOLLM2:
        try:
            out.prompts, out.group, out.max_new_tokens = (int(v) for v in args.smollm2_size.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--smollm2-size {args.smollm2_size!r}: expected P x G x new tokens, e.g. 4x8x64") from None
        if args.smollm2_steps < 2:
            raise SystemExit("--smollm2-steps must be >= 2 (the first iteration of each run is discarded)")
        out.steps = args.smollm2_steps
    return out


def write_report(
    args: argparse.Namespace,
    save: Results,
    sizes: dict[str, argparse.Namespace],
    results: dict[str, dict[str, Any]],
    started: float,
    final: bool,
) -> None:
    """``trl.json`` and ``trl.md`` from the runs so far (the table is printed when ``final``)."""
    first = next(iter(results.values()))
    summary = {name: model_summary(name, res, sizes[name]) for name, res in results.items()}
    report = {
        "settings": {
            "P": args.prompts,  # of the tiny-body entries; each summary entry has its own
            "G": args.group,
            "max_new_tokens": args.max_new_tokens,
            "threads": args.threads,
            "repeats": args.repeats,
            "pairs_run": min(len(res["trl"]) for res in results.values()),
            "complete": final,
            "steps_per_run": args.steps,
            "ours_overrides": first["ours"][0]["config"] if first["ours"] else [],
            "trl_config": first["trl"][0]["config"] if first["trl"] else {},
            "versions": versions(),
            "wall_s": round(time.perf_counter() - started, 1),
        },
        "summary": summary,
        "raw": {name: {"model": res["model"], **{side: res[side] for side in sides(name)}} for name, res in results.items()},
    }
    save.json(report, args.save_as)
    save.markdown(report_lines(args, report), args.save_as, echo=final)


def model_summary(name: str, res: dict[str, Any], size: argparse.Namespace) -> dict[str, Any]:
    """One model's medians on each side (the first iteration of each run left out) and their ratio."""
    ours, trl = res["ours"], res["trl"]
    s: dict[str, Any] = {
        "vocab": res["model"]["vocab"],
        "P": size.prompts,
        "G": size.group,
        "max_new_tokens": size.max_new_tokens,
        "lora": size.lora,
        "ours_kl_coef": size.kl_coef,
        "trl_beta": size.beta,
        "ours_proxy_dtype": size.smollm2_proxy_dtype if name == SMOLLM2 else "float32",
        "pairs": min(len(ours), len(trl)),
        "iterations_kept": {"ours": len(kept(ours, "step")), "trl": len(kept(trl, "step"))},
        "ours_s": {phase: median(kept(ours, phase)) for phase in PHASES},
        "trl_s": {phase: median(kept(trl, phase)) for phase in ("step", "interval", "rollout", "rewards_and_advantages", "update")},
        "completion_length": {
            "ours": sorted({round(v, 3) for run in ours for v in run["completion_length"]}),
            "trl": sorted({round(v, 3) for run in trl for v in run["completion_length"]}),
        },
        "ours_valid_thinking_rate": median([v for run in ours for v in run.get("valid_thinking_rate", [])]),
        "trl_prompt_length": median([v for run in trl for v in run["prompt_length"]]),
        "trl_completions_per_iteration": sorted({int(v) for run in trl for v in run["completions"]}),
    }
    s["ratio_ours_over_trl"] = s["ours_s"]["step"] / s["trl_s"]["step"]
    s["goal_0_8_met"] = bool(s["ratio_ours_over_trl"] <= 0.8)
    if name == SMOLLM2:
        s["fair"] = fair_summary(res, size)
    return s


# -- the smollm2 entry: equal work, both cadences, each phase against the matmul limit -------------------------
PROBE_ROWS = 1024  # positions of the probe's matmuls (a micro-batch of the update holds ~1,400)
# each side's phases and the work they must do at least, in forwards over the iteration's tokens
OURS_PHASES = {"rollout": 1.0, "scoring": 1.0, "update": 2.0, "proxy": None}
TRL_PHASES = {"rollout": 1.0, "rewards_and_advantages": 1.0, "update": 2.0}


def probe_limit(model_dir: str, before: dict[str, Any] | None = None) -> dict[str, Any]:
    """``torch.matmul``'s GFLOP/s at the model's shapes in each dtype (``bench_dtype.probe_rates``), the
    best of this probe and ``before``'s, and the model's sizes."""
    from benchmarks.bench_dtype import probe_rates, probe_shapes

    _, sizes = linear_params(Path(model_dir))
    rates = probe_rates(probe_shapes(sizes, PROBE_ROWS, PROBE_ROWS))
    if before:
        rates = {k: max(v, before["rates"].get(k, 0.0)) for k, v in rates.items()}
    return {"rates": rates, "sizes": sizes, "rows": PROBE_ROWS}


def forward_probe_s(probe: dict[str, Any], dtype: str, body_positions: float, head_positions: float) -> float:
    """What one forward's matmuls take at the probe's rates: every position through the decoder layers,
    ``head_positions`` (the completion tokens) through the LM head. LoRA's products and attention's score
    products are left out (a few percent)."""
    from benchmarks.bench_dtype import probe_seconds, probe_shapes

    shapes = probe_shapes(probe["sizes"], 1, 1)  # per position: probe_seconds sums 2 * rows * k * n
    one = probe_seconds(shapes, probe["sizes"]["layers"], [1], [1], probe["rates"], dtype)
    return body_positions * one["layers"] + head_positions * one["head"]


def mean_phases(runs: list[dict[str, Any]], phases: Any) -> dict[str, float]:
    """Each phase's mean over every run's iterations but its first: a mean, not a median, so the every-5
    proxy's one step in five is paid as a user pays it."""
    values = {p: kept(runs, p) for p in phases}
    return {p: statistics.fmean(v) if v else float("nan") for p, v in values.items()}


def fair_summary(res: dict[str, Any], size: argparse.Namespace) -> dict[str, Any]:
    """The smollm2 entry: mean iteration of each side, the ratios, the tokens each side generated and trained,
    and each phase's tokens/s and fraction of the matmul limit (the probe's time for the phase's least work:
    the prompt once per group and every completion token, one forward for generation and for the reference
    pass, a forward and a backward to the inputs for the update)."""
    runs = {side: res[side] for side in sides(SMOLLM2)}
    means = {
        "ours": mean_phases(runs["ours"], ("step", *OURS_PHASES)),
        EVERY5: mean_phases(runs[EVERY5], ("step", *OURS_PHASES)),
        "trl": mean_phases(runs["trl"], ("step", *TRL_PHASES)),
    }
    lengths = {side: kept(r, "completion_length") for side, r in runs.items()}
    completion = {side: statistics.fmean(v) if v else float("nan") for side, v in lengths.items()}
    prompt = median(kept(runs["trl"], "prompt_length"))  # the same prompts, token for token, on both sides
    P, G = size.prompts, size.group
    out: dict[str, Any] = {
        "tokens": size.smollm2_tokens,
        "dtype": size.smollm2_dtype,
        "steps_per_run": size.steps,
        "runs": {side: len(r) for side, r in runs.items()},
        "mean_s": means,
        "ratio_every_step_over_trl": means["ours"]["step"] / means["trl"]["step"],
        "ratio_every5_over_trl": means[EVERY5]["step"] / means["trl"]["step"],
        "completion_length": completion,
        "prompt_length": prompt,
        "equal_tokens": bool(all(v and set(v) == {float(size.max_new_tokens)} for v in lengths.values())),
    }
    out["goal_0_5_met"] = bool(out["ratio_every5_over_trl"] <= 0.5)
    probe = res.get("probe")
    phases: dict[str, dict[str, dict[str, float | None]]] = {}
    for side, table in (("ours", OURS_PHASES), (EVERY5, OURS_PHASES), ("trl", TRL_PHASES)):
        tokens = P * G * completion[side]
        limit = forward_probe_s(probe, size.smollm2_dtype, P * prompt + tokens, tokens) if probe else float("nan")
        phases[side] = {}
        for phase, forwards in table.items():
            seconds = means[side][phase]
            phases[side][phase] = {
                "s": seconds,
                "tokens_per_s": tokens / seconds if seconds else None,
                "probe_s": forwards * limit if forwards else None,
                "fraction_of_limit": forwards * limit / seconds if forwards and seconds else None,
            }
    out["phases"] = phases
    if probe:
        out["probe_gflops"] = {k: round(v, 1) for k, v in probe["rates"].items()}
    return out


def fair_lines(s: dict[str, Any]) -> list[str]:
    """trl.md's smollm2 section: ratio of each cadence, then every phase with tokens/s and its fraction of the limit."""
    f = s["fair"]
    names = {"ours": "ours, MI proxy every step", EVERY5: "ours, MI proxy every 5 (default)", "trl": "TRL"}
    lines = [
        "",
        f"## smollm2: equal work ({f['tokens']}: completions {', '.join(f'{names[k]} {v:.1f}' for k, v in f['completion_length'].items())} "
        f"tokens; equal: {f['equal_tokens']}), {f['dtype']} on both sides; means of iterations 2..{f['steps_per_run']}",
        "",
        f"- ours / TRL: **{f['ratio_every5_over_trl']:.2f}** with the MI proxy at its default cadence (goal <= 0.5: "
        f"{'met' if f['goal_0_5_met'] else 'not met'}), {f['ratio_every_step_over_trl']:.2f} with it every step",
        "",
        "| side | phase | s | tokens/s | matmul probe s (least work) | fraction of the limit |",
        "|---|---|---|---|---|---|",
    ]
    for side, phases in f["phases"].items():
        lines.append(f"| {names[side]} | iteration | {f['mean_s'][side]['step']:.2f} | | | |")
        for phase, v in phases.items():
            tps = f"{v['tokens_per_s']:.0f}" if v["tokens_per_s"] else "-"
            probe = f"{v['probe_s']:.2f}" if v["probe_s"] is not None else "-"
            frac = f"{v['fraction_of_limit']:.0%}" if v["fraction_of_limit"] is not None else "-"
            lines.append(f"| {names[side]} | {phase} | {v['s']:.2f} | {tps} | {probe} | {frac} |")
    lines += [
        "",
        "Tokens/s: completion tokens of the iteration (P x G x length) over the phase's seconds. Least work: the prompt once "
        "per group and every completion token through the decoder layers, completions through the LM head; one forward "
        "for generation and for the reference pass, forward + backward to the inputs for the update (recomputation under "
        "gradient checkpointing, LoRA and attention products not counted). Generation decodes a few rows a step, so it is "
        "bound by memory, not by this limit. Probe (GFLOP/s): " + ", ".join(f"{k} {v}" for k, v in (f.get("probe_gflops") or {}).items()),
    ]
    return lines


def report_lines(args: argparse.Namespace, report: dict[str, Any]) -> list[str]:
    """trl.md: the ratio table, the per-phase table and the versions."""
    summary, v = report["summary"], report["settings"]["versions"]
    lines = [
        f"# One RL iteration: ours vs TRL {v['trl']} GRPOTrainer ({args.threads} thread(s), MI proxy every step on ours, "
        f"medians of iterations 2..{args.steps} over {report['settings']['pairs_run']} alternating pair(s))",
        "",
        "| model (vocabulary) | P x G, new tokens | ours (s) | TRL (s) | ours / TRL | goal <= 0.8 | completion length ours / TRL |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        lengths = f"{'/'.join(map(str, s['completion_length']['ours']))} / {'/'.join(map(str, s['completion_length']['trl']))}"
        lines.append(
            f"| {name} ({s['vocab']}) | {s['P']} x {s['G']}, {s['max_new_tokens']} | {s['ours_s']['step']:.2f} | {s['trl_s']['step']:.2f} | "
            f"**{s['ratio_ours_over_trl']:.2f}** | {'met' if s['goal_0_8_met'] else 'not met'} | {lengths} |"
        )
    lines += [
        "",
        "| model | side | step | rollout | MI proxy | scoring | reference pass (beta > 0) + rewards + advantages | update |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        o, t = s["ours_s"], s["trl_s"]
        lines.append(
            f"| {name} | ours | {o['step']:.2f} | {o['rollout']:.2f} | {o['proxy']:.2f} | {o['scoring']:.2f} | (in rollout) | {o['update']:.2f} |"
        )
        lines.append(
            f"| {name} | TRL | {t['step']:.2f} | {t['rollout']:.2f} | - | - | {t['rewards_and_advantages']:.2f} | {t['update']:.2f} |"
        )
    lines += [
        "",
        "TRL's update = its step minus generation, rewards and advantages (loss, backward, optimizer step over 4 micro-batches); "
        "TRL step-to-step interval (includes its logging): "
        + ", ".join(f"{name}: {s['trl_s']['interval']:.2f} s" for name, s in summary.items()),
        "",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + f". Wall time {report['settings']['wall_s']:.0f} s.",
    ]
    for s in summary.values():
        if "fair" in s:
            lines += fair_lines(s)
    return lines


# -- the diagnostics' cost inside TRL (--collapse-cost) ------------------------------------------------------------
COLLAPSE_SIDES = {"TRL": -1, "proxy every step": 1, "proxy every 5": 5}  # side -> CollapseGRPOTrainer's compute_freq (-1: plain)


def collapse_cost(args: argparse.Namespace, save: Results, names: list[str], sizes: dict[str, argparse.Namespace], started: float) -> None:
    """TRL's iteration with and without our diagnostics, alternating; ``trl_collapse.{json,md}``."""
    results: dict[str, dict[str, list[dict[str, Any]]]] = {name: {side: [] for side in COLLAPSE_SIDES} for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        dirs, built = build_models(args, names, sizes, Path(tmp))
        for rep in rounds_within(args.repeats, args.max_minutes, started):
            for name in names:
                for side in turn_order(tuple(COLLAPSE_SIDES), rep, swap=True):
                    size = argparse.Namespace(**{**vars(sizes[name]), "collapse_freq": COLLAPSE_SIDES[side]})
                    t0 = time.perf_counter()
                    run = run_trl(dirs[name], size, Path(tmp) / f"collapse-{name}-{rep}-{COLLAPSE_SIDES[side]}.json")
                    results[name][side].append(run)
                    print(f"[{name}] {side} run {rep + 1}: {time.perf_counter() - t0:.0f}s wall, iterations {run['step']}", flush=True)
                    save_collapse_cost(args, save, sizes, built, results, started)
    save_collapse_cost(args, save, sizes, built, results, started, echo=True)


def save_collapse_cost(
    args: argparse.Namespace,
    save: Results,
    sizes: dict[str, argparse.Namespace],
    built: dict[str, Any],
    results: dict[str, Any],
    started: float,
    echo: bool = False,
) -> None:
    def mean_step(runs: list[dict[str, Any]]) -> float:
        steps = kept(runs, "step")
        return statistics.fmean(steps) if steps else float("nan")

    summary = {}
    for name, sides in results.items():
        plain = mean_step(sides["TRL"])
        summary[name] = {
            "P": sizes[name].prompts,
            "G": sizes[name].group,
            "max_new_tokens": sizes[name].max_new_tokens,
            "runs": {side: len(runs) for side, runs in sides.items()},
            "mean_step_s": {side: mean_step(runs) for side, runs in sides.items()},
            "ratio_over_trl": {side: mean_step(runs) / plain for side, runs in sides.items()},
        }
    report = {
        "settings": {
            "threads": args.threads,
            "steps_per_run": args.steps,
            "versions": versions(),
            "wall_s": round(time.perf_counter() - started, 1),
        },
        "summary": summary,
        "models": {name: res["model"] for name, res in built.items()},
        "raw": results,
    }
    save.json(report, "trl_collapse")
    lines = [
        f"# TRL's GRPOTrainer with and without our diagnostics (CollapseGRPOTrainer), {args.threads} thread(s): mean iteration "
        f"over iterations 2..{args.steps} of each run, alternating runs",
        "",
        "| model | P x G, new tokens | TRL (s) | + proxy every step (s) | ratio | + proxy every 5 (s) | ratio | runs each |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        m, r = s["mean_step_s"], s["ratio_over_trl"]
        lines.append(
            f"| {name} | {s['P']} x {s['G']}, {s['max_new_tokens']} | {m['TRL']:.2f} | {m['proxy every step']:.2f} | "
            f"**{r['proxy every step']:.2f}** | {m['proxy every 5']:.2f} | **{r['proxy every 5']:.2f}** | {min(s['runs'].values())} |"
        )
    lines += ["", "Versions: " + ", ".join(f"{k} {val}" for k, val in report["settings"]["versions"].items()) + "."]
    save.markdown(lines, "trl_collapse", echo=echo)


BENCHMARK = Benchmark(
    "trl",
    __doc__,
    main,
    flags,
    repeats=2,
    repeats_help="alternating ours/TRL pairs per model (one pair of all three: ~20 min on 2 cores)",
    threads=2,
    overrides="extra Hydra overrides for our side",
)

if __name__ == "__main__":
    run(BENCHMARK)
