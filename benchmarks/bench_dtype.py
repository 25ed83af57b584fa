"""float32 against bfloat16 weights for a real model on this CPU: rollout, scoring and update, side by side.

    python -m benchmarks.bench_dtype [--repeats 2] [key=value overrides ...]

Defaults to ``model=smollm2-135m`` (warm-started, cached) on FrozenLake at P=4 x G=8. For each repeat the
two dtypes alternate: the iteration-1 rollout batch (timed, tokens/s), a no-grad forward over its training
sequences (the scoring pass) and a forward + backward through the LoRA adapter (the update's work; the
adapter stays float32 under bf16 weights, peft's ``autocast_adapter_dtype``). Also the mean |log-prob|
difference of the sampled tokens between the two dtypes, on the float32 rollout. Saves
``benchmarks/results/dtype.json``. Not a test: numbers go in issue notes.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from agentcollapse.rollout.sequences import build_sequences, collate
from agentcollapse.run.jobs import config_and_policy, training_batch
from benchmarks.common import alternating, save_result, timed, with_model


def _passes(policy, batch, micro: int = 8) -> tuple[float, float, torch.Tensor]:
    """(scoring seconds, update seconds, per-token log-probs of the sampled tokens under this policy)."""
    from agentcollapse.rollout.sequences import gather_logprobs

    seqs = build_sequences(batch)
    pad = policy.tokenizer.pad_token_id
    order = list(range(len(seqs.input_ids)))

    def micro_batches():
        """(micro-batch, log-probs of every position from its first response token)."""
        for s in range(0, len(order), micro):
            mb = collate(seqs, order[s : s + micro], pad)
            start = int(mb["logits_from"])
            logits = policy.model(input_ids=mb["input_ids"], logits_to_keep=mb["input_ids"].shape[1] - start).logits
            yield mb, gather_logprobs(logits, mb["input_ids"], start)

    def scoring() -> list[torch.Tensor]:
        with torch.no_grad():
            return [logp[mb["response_mask"] > 0] for mb, logp in micro_batches()]

    def update() -> None:
        for mb, logp in micro_batches():
            (-(logp * mb["response_mask"]).sum() / mb["response_mask"].sum()).backward()
        policy.model.zero_grad(set_to_none=True)

    scoring_s, logps = timed(scoring)
    update_s, _ = timed(update)
    return scoring_s, update_s, torch.cat(logps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    base = with_model(args.overrides)
    base = [*base, "rollout.num_prompts=4", "rollout.group_size=8"] if not any("num_prompts" in o for o in base) else base
    times: dict[str, dict[str, list[float]]] = {}
    reference_batch, logp_by_dtype = None, {}
    for repeat, dtype in alternating(("float32", "bfloat16"), args.repeats):
        cfg, policy = config_and_policy([*base, f"model.dtype={dtype}"], report=False)
        batch, perf = training_batch(policy, cfg)
        scoring, update, _ = _passes(policy, batch)
        row = times.setdefault(dtype, {"rollout_s": [], "tokens_per_s": [], "scoring_s": [], "update_s": []})
        row["rollout_s"].append(perf["perf/rollout_time_s"])
        row["tokens_per_s"].append(perf["perf/rollout_tokens_per_s"])
        row["scoring_s"].append(scoring)
        row["update_s"].append(update)
        print(
            f"repeat {repeat} {dtype:9s} rollout {perf['perf/rollout_time_s']:.1f}s ({perf['perf/rollout_tokens_per_s']:.0f} tok/s)  "
            f"scoring {scoring:.1f}s  update {update:.1f}s",
            flush=True,
        )
        if repeat == 0:
            if dtype == "float32":
                reference_batch = batch
            logp_by_dtype[dtype] = _passes(policy, reference_batch)[2]
    median = {d: {k: statistics.median(v) for k, v in row.items()} for d, row in times.items()}
    ratio = {k: median["bfloat16"][k] / median["float32"][k] for k in ("rollout_s", "scoring_s", "update_s")}
    diff = float((logp_by_dtype["bfloat16"] - logp_by_dtype["float32"]).abs().mean())
    print(f"bf16 / fp32 time: rollout {ratio['rollout_s']:.2f}, scoring {ratio['scoring_s']:.2f}, update {ratio['update_s']:.2f}")
    print(f"mean |log p bf16 - log p fp32| over the sampled tokens: {diff:.4f} nats")
    save_result(
        "dtype", {"overrides": base, "repeats": args.repeats, "median": median, "ratio_bf16_over_fp32": ratio, "logp_abs_diff": diff}
    )


if __name__ == "__main__":
    main()
