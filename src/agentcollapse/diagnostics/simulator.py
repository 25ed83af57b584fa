"""Template-collapse simulator: synthetic prompts and reasoning traces with known I(X;Z) and H(Z|X).

Generative process (no RL, pure sampling):

* A prompt X is a small grid-world state: four entities (player, goal, hole, rock) on distinct cells of
  a 5x5 grid, written ``grid player R C goal R C hole R C rock R C <think>`` (R, C digits).
* A trace Z has ``NUM_SLOTS`` = 4 slots, one per entity in that order, each 5 tokens:

  - input-driven slot: ``<verb> <entity> <prep> R C``, R C = that prompt's coordinates of the entity;
  - template slot:     ``<verb> <entity> <prep> the board`` (same content for every prompt).

  With probability ``template_weight`` w a trace is a template trace (all slots template), otherwise
  input-driven (all slots name the prompt's positions). So w = 0 gives input-driven reasoning (high
  I(X;Z)), w = 1 the same template for every prompt (I(X;Z) = 0), and in between the share of
  collapsed traces grows linearly (retrieval accuracy ~ (1 - w) + w / P).
* ``diversity`` d sets the synonym set size S = 1 + round(d * 5) for the verb and the preposition. Both
  slot kinds make exactly the same two random choices, so H(Z|X) does not depend on w.

The four regimes of docs/method.md section 2 are the corners: (w=0, d=1) diverse reasoning, (w=1, d=1)
template collapse, (w=0, d=0) compressed reasoning, (w=1, d=0) low-entropy collapse.

Scoring uses a real small model: :class:`SimulatorScorer` trains a tiny ``LlamaForCausalLM`` from
scratch (deterministic seed, CPU, a few seconds) with a WordLevel tokenizer (HF ``tokenizers``) on the
simulator's own distribution at the given diversity, mixing all template weights in {0, .25, .5, .75, 1}
(both ends included), loss on trace tokens only. It therefore plays the role of the policy whose
traces are cross-scored. As the trace kind is unknown to it (its training mix has P(template) = 1/2),
every trace pays about log 2 nats for it at every w. :func:`run_simulation` builds a ``RolloutBatch`` from
simulated text, samples it with ``first_turn_sample``, cross-scores it and returns ``proxy_metrics``.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from agentcollapse.rollout.batch import RolloutBatch, Trajectory, Turn

from .cross_score import cross_score
from .proxy import column_equivalence, proxy_metrics
from .samplers import first_turn_sample

__all__ = [
    "GRID_SIZE",
    "NUM_SLOTS",
    "ENTITIES",
    "simulate",
    "simulator_vocab",
    "SimulatorScorer",
    "get_scorer",
    "run_simulation",
]

GRID_SIZE = 5
ENTITIES = ("player", "goal", "hole", "rock")
NUM_SLOTS = len(ENTITIES)
VERBS = ("see", "spot", "find", "note", "check", "locate")
PREPS = ("at", "on", "near", "by", "around", "about")
TEMPLATE_WORDS = ("the", "board")
MAX_SYNONYMS = len(VERBS)
TRAIN_TEMPLATE_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
SPECIAL_TOKENS = ("<pad>", "<unk>", "grid", "<think>")


# ----------------------------------------------------------------------------------------------
# generative process
# ----------------------------------------------------------------------------------------------


def simulator_vocab() -> list[str]:
    digits = [str(i) for i in range(GRID_SIZE)]
    return [*SPECIAL_TOKENS, *ENTITIES, *digits, *VERBS, *PREPS, *TEMPLATE_WORDS]


def _num_synonyms(diversity: float) -> int:
    if not 0.0 <= diversity <= 1.0:
        raise ValueError("diversity must be in [0, 1]")
    return 1 + int(round(diversity * (MAX_SYNONYMS - 1)))


def _sample_state(rng: np.random.Generator) -> list[tuple[int, int]]:
    cells = rng.choice(GRID_SIZE * GRID_SIZE, size=len(ENTITIES), replace=False)
    return [(int(c) // GRID_SIZE, int(c) % GRID_SIZE) for c in cells]


def _context_text(state: list[tuple[int, int]]) -> str:
    parts = ["grid"]
    for ent, (r, c) in zip(ENTITIES, state):
        parts += [ent, str(r), str(c)]
    parts.append("<think>")
    return " ".join(parts)


def _trace_text(state: list[tuple[int, int]], template_weight: float, num_syn: int, rng: np.random.Generator) -> str:
    template = bool(rng.random() < template_weight)
    words: list[str] = []
    for ent, (r, c) in zip(ENTITIES, state):
        verb = VERBS[int(rng.integers(num_syn))]
        prep = PREPS[int(rng.integers(num_syn))]
        tail = list(TEMPLATE_WORDS) if template else [str(r), str(c)]
        words += [verb, ent, prep, *tail]
    return " ".join(words)


def simulate(num_prompts: int, group_size: int, template_weight: float, diversity: float, seed: int) -> tuple[list[str], list[list[str]]]:
    """``num_prompts`` prompt texts and, per prompt, ``group_size`` reasoning traces (``traces[p][g]``)."""
    if not 0.0 <= template_weight <= 1.0:
        raise ValueError("template_weight must be in [0, 1]")
    num_syn = _num_synonyms(diversity)
    rng = np.random.default_rng(seed)
    contexts: list[str] = []
    traces: list[list[str]] = []
    for _ in range(num_prompts):
        state = _sample_state(rng)
        contexts.append(_context_text(state))
        traces.append([_trace_text(state, template_weight, num_syn, rng) for _ in range(group_size)])
    return contexts, traces


# ----------------------------------------------------------------------------------------------
# tiny policy model trained on the simulator's distribution
# ----------------------------------------------------------------------------------------------


def _build_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    vocab = {tok: i for i, tok in enumerate(simulator_vocab())}
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = WhitespaceSplit()
    return tok


class SimulatorScorer:
    """A tiny Llama trained (deterministically) on simulated (X, Z) text at one ``diversity``.

    Training mixes all ``template_weights``; the loss covers trace tokens only. ``encode`` maps text to
    ids (no special tokens). Use :func:`get_scorer` for an in-process cached instance.
    """

    def __init__(
        self,
        diversity: float = 1.0,
        *,
        steps: int = 200,
        batch_size: int = 64,
        lr: float = 5e-3,
        hidden_size: int = 64,
        num_layers: int = 2,
        template_weights: Sequence[float] = TRAIN_TEMPLATE_WEIGHTS,
        seed: int = 0,
    ) -> None:
        from transformers import LlamaConfig, LlamaForCausalLM

        self.diversity = float(diversity)
        self.tokenizer = _build_tokenizer()
        config = LlamaConfig(
            vocab_size=self.tokenizer.get_vocab_size(),
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=4,
            num_key_value_heads=4,
            max_position_embeddings=64,
            pad_token_id=0,
            bos_token_id=None,
            eos_token_id=None,
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.model = LlamaForCausalLM(config)
        self.train_log: list[float] = []
        self._train(steps, batch_size, lr, tuple(template_weights), seed)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def _train(self, steps: int, batch_size: int, lr: float, weights: tuple[float, ...], seed: int) -> None:
        rng = np.random.default_rng(seed + 1)
        num_syn = _num_synonyms(self.diversity)
        model = self.model
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * max(0.05, 1.0 - s / max(1, steps)))
        model.train()
        for _ in range(steps):
            seqs, n_ctx = [], 0
            for _ in range(batch_size):
                state = _sample_state(rng)
                w = weights[int(rng.integers(len(weights)))]
                ctx = self.encode(_context_text(state))
                seqs.append(ctx + self.encode(_trace_text(state, w, num_syn, rng)))
                n_ctx = len(ctx)
            ids = torch.tensor(seqs, dtype=torch.long)  # fixed layout: all sequences have equal length
            labels = ids.clone()
            labels[:, :n_ctx] = -100  # score p(Z | X) only
            loss = model(input_ids=ids, labels=labels).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            self.train_log.append(float(loss.detach()))
        model.eval()

    def batch(self, contexts_text: Sequence[str], traces_text: Sequence[Sequence[str]]) -> RolloutBatch:
        """A single-turn ``RolloutBatch`` (P groups x G trajectories) holding the simulated texts."""
        group_size = len(traces_text[0]) if traces_text else 0
        trajs = []
        for p, (ctx, group) in enumerate(zip(contexts_text, traces_text)):
            if len(group) != group_size:
                raise ValueError("every prompt needs the same number of traces")
            ctx_ids = self.encode(ctx)
            for z in group:
                turn = Turn(
                    context_ids=ctx_ids,
                    response_ids=self.encode(z),
                    response_text=f"{z} </think><answer></answer>",
                    think=z,
                    answer="",
                    format_valid=True,
                    action_is_valid=True,
                    reward=0.0,
                    observation=ctx,
                )
                trajs.append(Trajectory(group=p, env_seed=p, turns=[turn]))
        return RolloutBatch(trajectories=trajs, num_prompts=len(contexts_text), group_size=group_size)


_SCORERS: dict[tuple, SimulatorScorer] = {}


def get_scorer(diversity: float = 1.0, **kwargs: Any) -> SimulatorScorer:
    """In-process cached :class:`SimulatorScorer` (keyed by diversity and constructor arguments)."""
    # Defaults filled in, so get_scorer(1.0) and get_scorer(1.0, steps=<the default>) share one model.
    bound = inspect.signature(SimulatorScorer).bind(float(diversity), **kwargs)
    bound.apply_defaults()
    key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in bound.arguments.items()))
    if key not in _SCORERS:
        _SCORERS[key] = SimulatorScorer(diversity, **kwargs)
    return _SCORERS[key]


def run_simulation(
    template_weight: float,
    diversity: float = 1.0,
    *,
    num_prompts: int = 8,
    group_size: int = 8,
    seed: int = 0,
    scorer: SimulatorScorer | None = None,
    batch_size: int = 64,
) -> dict[str, float]:
    """Simulate one batch, sample it first-turn style, cross-score it with the tiny model, return proxy metrics.

    The result also holds ``valid_thinking_rate``, ``template_weight`` and ``diversity``. ``scorer``
    defaults to the cached one trained at ``diversity``.
    """
    scorer = scorer if scorer is not None else get_scorer(diversity)
    contexts_text, traces_text = simulate(num_prompts, group_size, template_weight, diversity, seed)
    sample = first_turn_sample(scorer.batch(contexts_text, traces_text), scorer.encode)
    logp = cross_score(scorer.model, sample.contexts, sample.traces, batch_size=batch_size)
    z_len = torch.tensor([len(t) for t in sample.traces], dtype=torch.float32)
    row_col = torch.tensor(sample.row_col, dtype=torch.long)
    out = proxy_metrics(logp, z_len, row_col, column_equivalence(sample.contexts))
    out["valid_thinking_rate"] = sample.stats["valid_thinking_rate"]
    out["template_weight"] = float(template_weight)
    out["diversity"] = float(diversity)
    return out
