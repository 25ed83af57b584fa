import numpy as np
import pytest

from agentcollapse.diagnostics import column_equivalence, first_turn_sample, trajectory_sample
from agentcollapse.rollout.batch import RolloutBatch, Trajectory, Turn

WORDS: dict[str, int] = {}


def encode(text: str) -> list[int]:
    return [WORDS.setdefault(w, 100 + len(WORDS)) for w in text.split()]


def _turn(ctx, think):
    return Turn(
        context_ids=list(ctx),
        response_ids=[1, 2],
        response_text=f"<think>{think}</think>",
        think=think,
        answer="Up",
        format_valid=True,
        action_is_valid=True,
        reward=0.0,
    )


def _batch():
    """P=3 groups x G=2; think text 'p<p> g<g> t<turn>' so a trace identifies its turn."""
    P, G = 3, 2
    trajs = []
    for p in range(P):
        for g in range(G):
            turns = []
            n_turns = 1 + (p + g) % 3
            for t in range(n_turns):
                ctx = [p] * 3 + [9] * t + ([g] if t else [])  # first turn's context shared by the group
                think = "" if (p == 1 and g == 0 and t == 0) else f"p{p} g{g} t{t}"
                turns.append(_turn(ctx, think))
            trajs.append(Trajectory(group=p, env_seed=p, turns=turns))
    trajs[5].turns[0].think = "   "  # whitespace-only reasoning counts as empty
    return RolloutBatch(trajectories=trajs, num_prompts=P, group_size=G)


def test_first_turn_sample():
    batch = _batch()
    contexts, traces, row_col, stats, weights = first_turn_sample(batch, encode)
    assert weights is None  # every token counts
    assert contexts == [[0, 0, 0], [1, 1, 1], [2, 2, 2]]  # one column per prompt, even if its rows drop
    # trajectories 2 (p1 g0) and 5 (p2 g1) have empty first-turn reasoning
    assert traces == [encode("p0 g0 t0"), encode("p0 g1 t0"), encode("p1 g1 t0"), encode("p2 g0 t0")]
    assert row_col == [0, 0, 1, 2]
    assert stats["valid_thinking_rate"] == pytest.approx(4 / 6)
    assert stats["num_traces"] == 4 and stats["num_contexts"] == 3


def test_trajectory_sample_pairs_and_columns():
    batch = _batch()
    contexts, traces, row_col, stats, _ = trajectory_sample(batch, encode, np.random.default_rng(0))
    assert len(contexts) == len(traces) == len(row_col) and row_col == list(range(len(traces)))
    inv = {v: k for k, v in WORDS.items()}
    for ctx, tr in zip(contexts, traces):
        p, g, t = (int(w[1:]) for w in (inv[i] for i in tr))
        # each column is the context of the very turn that produced the trace
        assert ctx == batch.trajectories[p * 2 + g].turns[t].context_ids
    assert all(len(tr) > 0 for tr in traces)
    n_candidates = 6
    assert stats["valid_thinking_rate"] == pytest.approx(len(traces) / n_candidates)
    # same seed, same sample
    again = trajectory_sample(batch, encode, np.random.default_rng(0))
    assert again.traces == traces and again.contexts == contexts


def test_trajectory_sample_turns_uniform_and_empty_dropped():
    batch = _batch()
    rng = np.random.default_rng(123)
    counts = np.zeros(3)
    rates = []
    for _ in range(300):
        s = trajectory_sample(batch, encode, rng)
        rates.append(s.stats["valid_thinking_rate"])
        inv = {v: k for k, v in WORDS.items()}
        for tr in s.traces:
            p, g, t = (int(inv[i][1:]) for i in tr)
            if (p, g) == (1, 1):  # 3 turns
                counts[t] += 1
        assert len(s.contexts) == len(s.traces)
    assert counts.sum() == 300 and counts.min() > 70  # ~100 each
    assert min(rates) < 1.0  # empty first turns are sometimes drawn and dropped


def test_trajectory_sample_num_samples_and_equivalence():
    batch = _batch()
    s = trajectory_sample(batch, encode, np.random.default_rng(1), num_samples=4)
    assert s.stats["num_candidates"] == 4 and len(s.traces) <= 4
    capped = trajectory_sample(batch, encode, np.random.default_rng(1), num_samples=100)
    assert capped.stats["num_candidates"] == 6
    # identical contexts in trajectory samples are flagged as equivalent columns
    eq = column_equivalence([[0, 0, 0], [1], [0, 0, 0]])
    assert eq[0] == eq[2] != eq[1]


def test_trajectory_without_turns_is_not_a_candidate():
    batch = _batch()
    batch.trajectories[0].turns = []
    s = first_turn_sample(batch, encode)
    assert s.stats["num_candidates"] == 5 and len(s.contexts) == 3
    t = trajectory_sample(batch, encode, np.random.default_rng(0))
    assert t.stats["num_candidates"] == 5


# -- issue 12: the authors' sampler options and the registry -----------------------------------------
def test_registry_runs_first_turn_then_trajectory():
    from agentcollapse.diagnostics import get_sampler, sampler_names, sampler_prefix
    from agentcollapse.errors import UserError

    assert sampler_names() == ("first_turn", "trajectory", "first_turn_nocopy", "trajectory_nocopy")
    assert get_sampler("first_turn").fn is first_turn_sample
    assert get_sampler("trajectory").fn is trajectory_sample
    assert sampler_prefix("trajectory") == "collapse_trajectory_sample"
    with pytest.raises(UserError, match="choose one of first_turn, trajectory"):
        get_sampler("turn")


def test_first_turn_num_samples_caps_valid_traces():
    batch = _batch()  # 6 first-turn candidates, 4 with reasoning
    s = first_turn_sample(batch, encode, np.random.default_rng(0), num_samples=2)
    assert len(s.traces) == 2 and s.stats["num_traces"] == 2
    assert s.stats["num_candidates"] == 6 and s.stats["num_valid"] == 4
    assert s.stats["valid_thinking_rate"] == pytest.approx(4 / 6)  # of the candidates, before the cap
    assert len(s.contexts) == 3  # every prompt keeps its column
    full = first_turn_sample(batch, encode)
    pairs = set(zip(map(tuple, full.traces), full.row_col))
    assert set(zip(map(tuple, s.traces), s.row_col)) <= pairs and len(set(map(tuple, s.traces))) == 2
    # a cap at or above the valid count keeps them all and draws nothing
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    assert first_turn_sample(batch, encode, rng, num_samples=64).traces == full.traces
    assert rng.bit_generator.state == state
    with pytest.raises(ValueError, match="needs an rng"):
        first_turn_sample(batch, encode, None, num_samples=2)


def test_trajectory_sample_with_replacement():
    batch = _batch()  # 6 trajectories, 12 turns of which 10 have non-blank reasoning
    s = trajectory_sample(batch, encode, np.random.default_rng(5), num_samples=40, replace=True)
    assert s.stats["num_candidates"] == 10  # capped at the valid (trajectory, turn) pairs
    default = trajectory_sample(batch, encode, np.random.default_rng(5), replace=True)
    assert default.stats["num_candidates"] == 6  # one draw per trajectory by default
    # over many draws some trajectory is drawn twice in one sample; its pairs can then coincide
    rng = np.random.default_rng(0)
    dup = False
    for _ in range(50):
        t = trajectory_sample(batch, encode, rng, num_samples=6, replace=True)
        dup |= len({tuple(c) for c in t.contexts}) < len(t.contexts)
        assert t.row_col == list(range(len(t.traces)))
    assert dup
    again = trajectory_sample(batch, encode, np.random.default_rng(5), num_samples=40, replace=True)
    assert again.traces == s.traces and again.contexts == s.contexts


def test_the_registry_is_the_one_list_of_samplers():
    # the schema's help for diagnostics.skip_samplers names them: it must name the registry's, in order
    import re

    from agentcollapse.config.schema import DiagnosticsConfig, field_help
    from agentcollapse.diagnostics import get_sampler, sampler_names

    help_text = dict((name, text) for name, _, text in field_help(DiagnosticsConfig))["skip_samplers"]
    named = re.search(r"\(([^;]*);", help_text).group(1).split(", ")
    assert tuple(named) == sampler_names()
    # the nocopy samplers draw with their plain ones' options (collapse_metrics reads draws_like)
    assert {n: get_sampler(n).draws_like for n in sampler_names()} == {
        "first_turn": "first_turn",
        "trajectory": "trajectory",
        "first_turn_nocopy": "first_turn",
        "trajectory_nocopy": "trajectory",
    }


def test_the_config_help_names_every_registered_sampler():
    # the config layer cannot import the registry (it sits below it), so its help text names the samplers
    # in words; this keeps those words the registry's
    import re

    from agentcollapse.config.schema import DiagnosticsConfig, field_help
    from agentcollapse.diagnostics.samplers import sampler_names

    help_text = next(h for name, _, h in field_help(DiagnosticsConfig) if name == "skip_samplers")
    listed = re.search(r"\(([^;)]*);", help_text).group(1).split(", ")
    assert listed == list(sampler_names()), f"skip_samplers' help lists {listed}; the registry has {sampler_names()}"
