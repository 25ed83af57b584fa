"""The update's forward + backward on SmolLM2-135M with the output head on every position after
``logits_from`` (the code before ``response_token_stats``) against the head on the response tokens only.

    python -m benchmarks.bench_head [--repeats 4] [--threads 1] [--dtype bfloat16|float32]

One micro-batch of 2 sequences of 560 tokens shaped like a SmolLM2 FrozenLake trajectory (the first
response at position 251, then 3 turns of 70 response and 35 observation tokens: 68% of the positions
after ``logits_from`` are response tokens), LoRA r=16 on q/v, activation checkpointing on, as the
pre-registered experiment trains. Both versions alternate on the same batch and are timed in CPU seconds
(the first repeat of each is dropped). Prints the ratio; nothing is saved.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import peft
import torch
import transformers

from agentcollapse.algorithms.losses import entropy_from_logits, response_token_stats
from agentcollapse.models.logprobs import token_logprobs
from agentcollapse.models.smollm2 import smollm2_dir
from benchmarks.common import Benchmark, Results, run

B, T, START = 2, 560, 250


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16", help="the update's autocast dtype")


def main(args: argparse.Namespace, save: Results) -> None:
    torch.set_num_threads(args.threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(smollm2_dir(Path.home() / ".cache" / "agentcollapse"))
    model.gradient_checkpointing_enable()
    model.config.use_cache = False
    model = peft.get_peft_model(model, peft.LoraConfig(r=16, target_modules=["q_proj", "v_proj"]))
    ids = torch.randint(10, 40000, (B, T), generator=torch.Generator().manual_seed(0))
    mask = torch.zeros(B, T - 1 - START)
    for turn in range(3):
        mask[:, turn * 105 : turn * 105 + 70] = 1
    targets = ids[:, START + 1 :]
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bfloat16")

    def every_position() -> None:
        with autocast:
            logits = model(input_ids=ids, logits_to_keep=T - START).logits[:, :-1]
            logp, entropy = token_logprobs(logits, targets), entropy_from_logits(logits)
        ((logp + 1e-3 * entropy) * mask).sum().backward()

    def responses_only() -> None:
        with autocast:
            hidden = model(input_ids=ids, output_hidden_states=True, logits_to_keep=1).hidden_states[-1][:, START:-1]
            logp, entropy = response_token_stats(model.get_output_embeddings(), hidden, targets, mask)
        ((logp + 1e-3 * entropy) * mask).sum().backward()

    arms = {"every position": every_position, "responses only": responses_only}
    times: dict[str, list[float]] = {name: [] for name in arms}
    for rep in range(args.repeats):
        for name in list(arms)[:: 1 if rep % 2 == 0 else -1]:
            model.zero_grad()
            started = time.process_time()
            arms[name]()
            times[name].append(time.process_time() - started)
    old, new = (statistics.median(times[name][1:]) for name in arms)
    print(
        f"response share {float(mask.mean()):.2f}, {args.dtype}: every position {old:.2f} CPU s, responses only {new:.2f} CPU s: {new / old:.2f}x"
    )


BENCHMARK = Benchmark(
    "head", __doc__, main, flags, repeats=4, repeats_help="alternating pairs (the first is dropped)", threads=1, out=None, overrides=None
)

if __name__ == "__main__":
    run(BENCHMARK)
