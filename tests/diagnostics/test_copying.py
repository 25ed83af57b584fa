"""The copy detector (issue 17) and the nocopy samplers: which reasoning tokens restate the
observation, on real env text and under several tokenizers, and the proxy once they are masked."""

from __future__ import annotations

import functools
import random
import re

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from agentcollapse import envs
from agentcollapse.diagnostics import (
    column_equivalence,
    copied_runs,
    copied_token_mask,
    copied_words,
    cross_score,
    first_turn_nocopy_sample,
    first_turn_sample,
    get_scorer,
    proxy_metrics,
    simulate,
    trajectory_nocopy_sample,
    trajectory_sample,
)
from agentcollapse.models.context import encode
from agentcollapse.models.tokenizer import build_tokenizer
from agentcollapse.rollout.batch import RolloutBatch, Trajectory, Turn

COORD = re.compile(r"\( \d+ , \d+ \)")


def _episodes(name: str, seeds=range(20)):
    """(observation, demonstration reasoning) of the first turns of ``name`` on ``seeds``."""
    out = []
    for seed in seeds:
        env = envs.make(name)
        obs = env.reset(seed)
        think, _ = env.demonstration(random.Random(seed), suboptimal_prob=0.5)
        out.append((obs, think))
    return out


def _marked(obs: str, think: str) -> list[tuple[int, int]]:
    """Character ranges of the copied words."""
    spans = [m.span() for m in re.finditer(r"\S+", think)]
    return [s for s, c in zip(spans, copied_words(obs, think)) if c]


def _coords_copied(obs: str, think: str) -> bool:
    """Every coordinate pair the reasoning names lies inside copied runs."""
    runs = copied_runs(obs, think)
    return all(any(a <= m.start() and m.end() <= b for a, b in runs) for m in COORD.finditer(think))


@pytest.mark.parametrize("name", ["frozenlake", "sokoban"])
def test_demonstrations_copy_their_coordinates_and_not_their_decision(name):
    for obs, think in _episodes(name):
        assert COORD.search(think), think
        assert _coords_copied(obs, think), (obs, think)
        # the decision is not in the observation: the closing clause (the move) is not all copied
        closing = think.split(" . ")[-1].split()
        assert not all(copied_words(obs, think)[-len(closing) :]), think
        assert 0 < len(_marked(obs, think)) < len(think.split())


def test_frozenlake_example():
    env = envs.make("frozenlake")
    obs = env.reset(3)  # player at ( 1 , 0 ), goal ( 2 , 3 ) down and right, no hole around
    think = "My position is ( 1 , 0 ) . The goal is down and right . All sides are safe . I will go down ."
    words = think.split()
    flags = copied_words(obs, think)
    assert [w for w, c in zip(words, flags) if c] == "( 1 , 0 ) . The goal is down and right".split()
    # a wrong position is not a copy: only the shared ", 0 ) ." tail would be
    wrong = copied_words(obs, "I am at ( 3 , 3 ) .")
    assert not any(wrong[:5])


def test_run_rules():
    obs = "You are at ( 2 , 3 ) . Box at ( 4 , 1 ) ."
    # case-folded; runs shorter than min_words are not copies
    assert copied_words(obs, "box at ( 4 , 1 )") == [True] * 7
    assert copied_words(obs, "you are") == [False, False]
    assert copied_words(obs, "you are", min_words=2) == [True, True]
    # the union of matching 3-grams: ") . box" is not in the observation, but each word is in a run
    assert copied_words(obs, "( 2 , 3 ) . box at") == [True] * 8
    assert copied_runs(obs, "I am at ( 2 , 3 ) now") == [(5, 17)]  # "at ( 2 , 3 )"
    assert copied_words("", "a b c") == [False] * 3 and copied_words(obs, "") == []
    with pytest.raises(ValueError, match="min_words"):
        copied_words(obs, "x", min_words=0)


# -- word runs -> token positions, under several tokenizers ----------------------------------------
def _corpus() -> list[str]:
    return [text for name in ("frozenlake", "sokoban") for pair in _episodes(name, range(40)) for text in pair]


def _trained(pre, model, trainer) -> PreTrainedTokenizerFast:
    core = Tokenizer(model)
    core.pre_tokenizer = pre
    core.train_from_iterator(_corpus(), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core)


@functools.cache
def _tokenizers() -> dict[str, PreTrainedTokenizerFast]:
    return {
        "word_level": build_tokenizer(_corpus()),  # the tiny policy's
        "byte_bpe": _trained(  # GPT-2 style: the space belongs to the next token
            pre_tokenizers.ByteLevel(add_prefix_space=False),
            models.BPE(),
            trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False),
        ),
        "metaspace_unigram": _trained(  # SentencePiece style
            pre_tokenizers.Metaspace(),
            models.Unigram(),
            trainers.UnigramTrainer(vocab_size=200, show_progress=False),
        ),
    }


def _mask_from_offsets(tok, obs: str, think: str) -> list[bool]:
    """Reference: a token is copied when every character it covers lies in a copied run, the space
    before the run's first word included (a byte-level BPE writes it inside that word's token)."""
    enc = tok(think, add_special_tokens=False, return_offsets_mapping=True)
    runs = [(len(think[:s].rstrip()), e) for s, e in copied_runs(obs, think)]
    return [b > a and all(any(s <= i < e for s, e in runs) for i in range(a, b)) for a, b in enc["offset_mapping"]]


@pytest.mark.parametrize("kind", ["word_level", "byte_bpe", "metaspace_unigram"])
def test_token_mask_matches_offsets(kind):
    tok = _tokenizers()[kind]
    enc = lambda text: encode(tok, text)  # noqa: E731
    pairs = _episodes("frozenlake", range(40, 52)) + _episodes("sokoban", range(40, 52))
    spaced = False
    for obs, think in pairs:
        ids = enc(think)
        mask = copied_token_mask(obs, think, enc)
        assert len(mask) == len(ids) and mask == copied_token_mask(obs, think, enc, ids)
        assert mask == _mask_from_offsets(tok, obs, think), (kind, think)
        assert any(mask) and not all(mask)
        offsets = tok(think, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        spaced |= any(think[a:b] != think[a:b].strip() for a, b in offsets)
    assert spaced == (kind != "word_level")  # the subword tokenizers write the spaces into tokens


def test_a_run_inside_a_token_is_left_scored():
    obs = "at ( 2 , 3 ) ."

    def merging(text: str) -> list[int]:  # a tokenizer that merges "now (" across the space
        return [hash(w) % 1000 for w in text.replace("now (", "now(").split()]

    think = "now ( 2 , 3 ) ok"
    assert copied_words(obs, think) == [False, True, True, True, True, True, False]
    assert copied_token_mask(obs, think, merging) == [False] * 6
    assert copied_token_mask(obs, "then ( 2 , 3 ) ok", merging) == [False, True, True, True, True, True, False]


# -- the nocopy samplers ------------------------------------------------------------------------------
WORDS: dict[str, int] = {}


def _encode(text: str) -> list[int]:
    return [WORDS.setdefault(w, 100 + len(WORDS)) for w in text.split()]


def _env_batch(name: str, P: int = 4, G: int = 3) -> RolloutBatch:
    """P maps x G first turns with the planner's reasoning; contexts are the observation's words."""
    trajs = []
    for p in range(P):
        for g in range(G):
            env = envs.make(name)
            obs = env.reset(p)
            think, answer = env.demonstration(random.Random(p * G + g), 0.5)
            turn = Turn(_encode(obs), [1], "", think, answer, True, True, 0.0, grounding=env.grounding(think), observation=obs)
            trajs.append(Trajectory(group=p, env_seed=p, turns=[turn]))
    return RolloutBatch(trajectories=trajs, num_prompts=P, group_size=G)


@pytest.mark.parametrize("name", ["frozenlake", "sokoban"])
def test_nocopy_samplers_same_draws_weights_zero_on_copies(name):
    batch = _env_batch(name)
    for plain_fn, nocopy_fn, n in ((first_turn_sample, first_turn_nocopy_sample, 5), (trajectory_sample, trajectory_nocopy_sample, 6)):
        plain = plain_fn(batch, _encode, np.random.default_rng(0), n)
        s = nocopy_fn(batch, _encode, np.random.default_rng(0), n)
        assert (s.contexts, s.traces, s.row_col) == (plain.contexts, plain.traces, plain.row_col)
        assert plain.token_weights is None and len(s.token_weights) == len(s.traces)
        copied = total = 0
        for ids, w in zip(s.traces, s.token_weights):
            turn = next(t for traj in batch.trajectories for t in traj.turns if _encode(t.think) == ids)
            assert w == [0.0 if c else 1.0 for c in copied_words(turn.observation, turn.think)]
            copied, total = copied + w.count(0.0), total + len(w)
        assert s.stats["copied_token_frac"] == pytest.approx(copied / total) and 0 < copied < total
        assert s.lengths() == [sum(w) for w in s.token_weights]
        assert s.stats["state_grounding"] == plain.stats["state_grounding"] == 1.0  # the planner tells the truth


def test_a_trace_with_nothing_but_copies_counts_one_token():
    turn = Turn([5, 6], [1], "", "at ( 2 , 3 )", "Up", True, True, 0.0, observation="You are at ( 2 , 3 ) .")
    batch = RolloutBatch([Trajectory(0, 0, [turn])], 1, 1)
    s = first_turn_nocopy_sample(batch, _encode)
    assert s.token_weights == [[0.0] * 6] and s.lengths() == [1.0] and s.stats["copied_token_frac"] == 1.0


# -- synthetic: reasoning that only copies the coordinates --------------------------------------------
@pytest.fixture(scope="module")
def scorer():
    return get_scorer(1.0)  # the simulator's tiny Llama (a few seconds, cached in-process)


def _metrics(scorer, sample, weights=None):
    weights = sample.token_weights if weights is None else weights
    logp = cross_score(scorer.model, sample.contexts, sample.traces, weights=weights)
    z_len = torch.tensor([max(1.0, sum(w)) for w in weights] if weights else sample.lengths())
    return proxy_metrics(logp, z_len, torch.tensor(sample.row_col), column_equivalence(sample.contexts))


def test_copied_coordinates_alone_give_plain_retrieval_not_nocopy(scorer):
    # Input-driven simulator traces ("see player at R C ..."): the only input-dependent words are the
    # coordinates, copied from the prompt as 2-word runs "R C" (hence min_words=2 here).
    contexts, traces = simulate(8, 8, template_weight=0.0, diversity=1.0, seed=1)
    batch = scorer.batch(contexts, traces)
    plain = _metrics(scorer, first_turn_sample(batch, scorer.encode))
    sample = first_turn_nocopy_sample(batch, scorer.encode, min_words=2)
    nocopy = _metrics(scorer, sample)
    assert sample.stats["copied_token_frac"] == pytest.approx(0.4)  # R C of every 5-word slot
    assert plain["retrieval_accuracy"] > 0.9 and plain["mi_estimate"] > 0.5
    assert nocopy["retrieval_chance_level"] == pytest.approx(1 / 8)
    assert abs(nocopy["retrieval_above_chance"]) < 0.1 and abs(nocopy["mi_estimate"]) < 0.02
    # the control: masking as many other tokens (verb and preposition) keeps the retrieval
    others = [[0.0 if k % 5 in (0, 2) else 1.0 for k in range(len(t))] for t in sample.traces]
    assert _metrics(scorer, sample, others)["retrieval_accuracy"] > 0.9
    # the default (3 words) does not count bare 2-word coordinates as copies
    assert first_turn_nocopy_sample(batch, scorer.encode).stats["copied_token_frac"] == 0.0
