"""Each built-in env's constructor keywords: one typed dataclass per env, every field with its default and
a one-line help. They are the one source of those defaults: the env's constructor takes its default values
from here (``_D = FrozenLakeKwargs()``, ``size: int = _D.size``), and ``conf/env/<name>.yaml`` composes
the ``<name>_schema`` node (an :class:`~agentcollapse.config.schema.EnvConfig` whose ``kwargs`` is the
dataclass, registered by ``config.compose.register_configs``) instead of restating them. So
``env.kwargs.slip=0.3`` overrides without ``+``, a misspelt key or a wrong type is an error at compose,
and ``agentcollapse train --help`` lists every key with its help.

Like the rest of the config layer this is plain data: it imports nothing of the package. Lists stand for
the constructors' tuples (OmegaConf has no tuples): the constructors turn them into tuples.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentcollapse.config.schema import opt

__all__ = [
    "ENV_KWARGS",
    "CountdownKwargs",
    "DeepCoderKwargs",
    "FrozenLakeKwargs",
    "MathKwargs",
    "SearchQAKwargs",
    "SokobanKwargs",
    "WebShopKwargs",
]


@dataclass
class FrozenLakeKwargs:
    """FrozenLake 4x4 (docs/method.md section 7)."""

    size: int = opt(4, help="side of the square map (size x size cells)")
    frozen_prob: float = opt(0.9, help="chance a cell is ice rather than a hole when a map is drawn, in (0, 1]")
    slip: float = opt(0.0, help="chance a move goes perpendicular instead, in [0, 1] (noise study: 0 ... 1.0)")
    max_turns: int = opt(5, help="turn budget of an episode")
    max_actions_per_turn: int = opt(2, help="actions executed per turn (joined by ||)")
    max_actions: int = opt(10, help="action budget of an episode")


@dataclass
class SokobanKwargs:
    """Sokoban (docs/method.md section 7): 6x6, one box, up to 10 actions over at most 5 turns of 2 actions."""

    dim_room: list[int] = opt(factory=lambda: [6, 6], help="room [height, width] in cells, walls included (3x3 to 400 cells)")
    num_boxes: int = opt(1, help="boxes (and targets) in a room")
    max_steps: int = opt(10, help="action budget of an episode (also the longest shortest solution a level may have)")
    search_depth: int = opt(100, help="depth limit of the BFS planner that checks a level is solvable")
    num_reverse_steps: int = opt(100, help="random reverse moves per generation attempt")
    max_turns: int = opt(5, help="turn budget of an episode")
    max_actions_per_turn: int = opt(2, help="actions executed per turn (joined by ||)")


@dataclass
class CountdownKwargs:
    """Countdown: a few numbers and a reachable target; one turn, one expression. Three numbers by default
    (headroom for the tiny policy); TinyZero's 3-4 numbers: ``env.kwargs.max_numbers=4`` (conf/env/countdown.yaml
    gives the measured successes)."""

    min_numbers: int = opt(3, help="fewest numbers a problem gives (2 <= min_numbers <= max_numbers <= 5)")
    max_numbers: int = opt(3, help="most numbers a problem gives (TinyZero's Countdown: 4)")
    max_number: int = opt(10, help="the numbers are drawn from 1..max_number (>= 2)")
    max_target: int = opt(100, help="targets lie in 1..max_target, each reachable from its numbers")


@dataclass
class MathKwargs:
    """Generated arithmetic word problems standing in for MetaMathQA."""

    difficulty: int = opt(1, help="1 (one operation, numbers 2-10) | 2 (two operations, up to 20) | 3 (three, up to 50)")


@dataclass
class WebShopKwargs:
    """WebShop (Yao et al. 2022). With ``env.data_path`` set, num_products, catalogue_seed and the max_goal_* knobs
    are unused. The goal size gives SmolLM2-135M headroom (1 attribute, no options: T=1 success 0.469; the
    original's 1-3 attributes and 1-2 options: 0.000): the original is ``env.kwargs.max_goal_attributes=3
    env.kwargs.max_goal_options=2``."""

    num_products: int = opt(5000, help="size of the generated catalogue (any size; the BM25 index builds in ~1 s per 5000)")
    catalogue_seed: int = opt(0, help="seed of the generated catalogue (instructions are drawn per episode seed)")
    results_per_page: int = opt(5, help="items on a results page (the original shows 10; 5 keeps 8 turns in the tiny policy's 2048 tokens)")
    max_results: int = opt(50, help="search hits kept and paged through (the original's SEARCH_RETURN_N)")
    max_turns: int = opt(8, help="turn budget: an episode that has not bought by then ends with reward 0 (the planner needs 4-7)")
    max_actions_per_turn: int = opt(1, help="actions executed per turn (joined by ||); WebShop is one action a step")
    max_goal_attributes: int = opt(
        1, help="a generated instruction asks for 1 to this many of its product's attributes (the original's synthetic goals: 3)"
    )
    max_goal_options: int = opt(
        0, help="a generated instruction asks to choose a value of 1 to this many of its option dimensions, 0 for none (the original's: 2)"
    )


@dataclass
class SearchQAKwargs:
    """SearchQA (Search-R1 style): BM25 search over passages, then an answer."""

    num_passages: int = opt(
        2000, help="generated world: passages, one per invented entity (countries, cities, organisations, people); >= 40"
    )
    world_seed: int = opt(0, help="generated world: the seed of its names and facts (questions are drawn per episode seed)")
    kinds: list[str] = opt(
        factory=lambda: ["single"],
        help="generated questions drawn from: single (one hop) | bridge (two hops) | comparison (of two entities); single "
        "only by default (the headroom SmolLM2 needs), [single,bridge,comparison] for Search-R1's multi-hop mix",
    )
    top_k: int = opt(3, help="passages a search shows")
    max_turns: int = opt(4, help="turn budget: searches plus the answer (bridge and comparison questions need 3)")
    max_passage_words: int = opt(40, help="words of a passage's text the observation shows (real corpora: ~100-word passages)")
    k1: float = opt(1.5, help="BM25 term-frequency saturation")
    b: float = opt(0.75, help="BM25 document-length normalisation, in [0, 1]")


@dataclass
class DeepCoderKwargs:
    """DeepCoder: write a Python program; hidden tests run it in a sandbox."""

    difficulty: int = opt(1, help="generated family: 1 (one operation), 2 (conditions, two inputs), 3 (two-step tasks)")
    style: str = opt("mixed", help="stdio (read stdin, print) | call (define solve(...)) | mixed (half each)")
    num_tests: int = opt(5, help="hidden tests per generated problem; the first is shown as the example")
    max_turns: int = opt(1, help="1: single turn as in the paper; >1: a failed program sees the first failing example and retries")
    partial_credit: bool = opt(False, help="true: reward = share of passing tests (off: 1 only when all pass)")
    sandbox: str = opt("strict", help="strict: refuse to run without every sandbox layer; best_effort: run, saying once what is missing")
    cpu_seconds: float = opt(2.0, help="CPU time per test")
    wall_seconds: float = opt(4.0, help="wall-clock time per test")
    memory_mb: int = opt(512, help="address space of a program, in MB")
    output_bytes: int = opt(1 << 20, help="stdout read per test; beyond it the program is killed")
    workers: int = opt(2, help="programs graded at once by a batch (run_many)")


ENV_KWARGS: dict[str, type] = {
    "frozenlake": FrozenLakeKwargs,
    "sokoban": SokobanKwargs,
    "countdown": CountdownKwargs,
    "math": MathKwargs,
    "webshop": WebShopKwargs,
    "searchqa": SearchQAKwargs,
    "deepcoder": DeepCoderKwargs,
}
"""env name -> its constructor keywords' dataclass; ``register_configs`` stores ``env/<name>_schema`` for each."""
