"""Fuzz the response parser and every env's ``step`` with random bytes and adversarial model output.

Whatever a policy emits, nothing may raise: the parser returns a ParsedResponse, and ``step`` returns a
well-formed transition in which a turn without any valid action is counted as invalid
(``info["action_is_valid"]`` False) and earns exactly the env's format penalty. Seeded, so a failure
reproduces; about a second on one thread.
"""

from __future__ import annotations

import copy
import math
import random

import pytest

from agentcollapse.envs import make
from agentcollapse.envs.parsing import ParsedResponse, parse_response

ENVS = ("frozenlake", "sokoban", "countdown", "math", "searchqa", "webshop")
SEEDS = (0, 7, 1_000_003)
# Pieces a language model tends to emit around the format; mixed with raw bytes below.
FRAGMENTS = (
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<think",
    "answer>",
    "</",
    "||",
    "|",
    " ",
    "\n",
    "\t",
    "Left",
    "down",
    "RIGHT",
    "Up",
    "( 0 , 1 )",
    "(",
    ")",
    "1",
    "9",
    "0",
    "+",
    "-",
    "*",
    "/",
    "**",
    "//",
    "=",
    ".",
    ",",
    "$",
    "\\boxed{",
    "}",
    "hole",
    "no",
    "safe",
    "\x00",
    "\u200b",
    "\u202e",
    "é",
    "漢",
    "🙂",
    "\ud800",
    "١٢",
)

# Responses built to trip the parser: nesting, repetition, unclosed or reversed tags, huge payloads.
ADVERSARIAL_RESPONSES = (
    "",
    " ",
    "</think>",
    "<answer></answer>",
    "</think><answer></answer>",
    "<think><think> a </think></think><answer> Left </answer>",
    "<answer> Left </answer></think>",
    "</answer> Left <answer>",
    "</think>" * 5000 + "<answer>Left</answer>",
    "<think>" * 5000,
    "<answer>" * 2000 + "Left" + "</answer>" * 2000,
    "</think><answer>" + "Left || " * 5000 + "</answer>",
    "</think><answer>" + "x" * 200_000 + "</answer>",
    "</think><answer>" + "9" * 10_000 + "</answer>",
    "</think><answer> Left \x00 </answer>",
    "</think><answer>\u202eLeft</answer>",
    "\ud800</think><answer>\udfff</answer>",
    "</think>\n\n<answer>\n Left \n</answer>\n" + "junk" * 100,
    "<think> a </think> b <answer> Left </answer>",
    "</think><answer> Left <answer> Down </answer> </answer>",
)

# Answers that execute no valid action in the given env (the penalty must apply).
INVALID_ANSWERS = {
    "common": (
        "",
        "   ",
        "||",
        " || || ",
        "\x00",
        "\u200bLeft",
        "Leftt",
        "L e f t",
        "<answer>Left</answer>",
        "Left" * 1000,
        "🙂",
        "None",
        "\\boxed{}",
        "((((",
        "\ud800",
        "x" * 100_000,
    ),
    "frozenlake": ("Left Down", "Up!", "1", "north", "gauche"),
    "sokoban": ("Left Down", "Up!", "1", "push", "wait"),
    "countdown": (
        "abc",
        "1 +",
        "(1",
        "1)",
        "()",
        "1 ** 2",
        "1 // 2",
        "-1",
        "1.5",
        "1e3",
        "1 = 1",
        "9" * 101,
        "(" * 11 + "1" + ")" * 11,
        "١ + ٢",
        "1234567 + 1",
        "Left",
        "1 + + 2",
    ),
    "searchqa": ("search[]", "search[ the of ]", "answer[ ]", "search Orvel", "search[Orvel", "find[Orvel]", "answer: Orvel", "[Orvel]"),
    "webshop": (
        "search[]",
        "search[ the of ]",
        "click[]",
        "click[buy now]",
        "click[next >]",
        "click[B0-0]",
        "search shirt",
        "search[shirt",
        "buy[B0-0]",
        "[shirt]",
    ),
    "math": (
        "abc",
        "1e3",
        "1/0",
        "nan",
        "inf",
        "--1",
        "\\boxed{abc}",
        "$",
        "one",
        "Left",
        "9" * 5000,
        "1." + "0" * 5000,
        "1/" + "7" * 5000,
    ),
}


def random_texts(rng: random.Random, n: int) -> list[str]:
    """Random byte strings decoded three ways, and random mixes of fragments and bytes."""
    texts = []
    for i in range(n):
        length = rng.choice((0, 1, 2, 5, 17, 64, 300, 4096))
        if i % 2 == 0:
            raw = bytes(rng.randrange(256) for _ in range(length))
            codec = ("utf-8", "replace") if i % 3 else (("latin-1", "strict") if i % 4 else ("utf-8", "surrogateescape"))
            texts.append(raw.decode(*codec))
        else:
            parts = [rng.choice(FRAGMENTS) if rng.random() < 0.7 else chr(rng.randrange(0x110000)) for _ in range(length // 4 + 1)]
            texts.append("".join(parts))
    return texts


TEXTS = random_texts(random.Random(20240611), 240) + list(ADVERSARIAL_RESPONSES)


@pytest.fixture(scope="module")
def fresh_envs():
    """One reset env per (name, seed); tests step deep copies so a reset's cost is paid once."""
    out = {}
    for name in ENVS:
        for seed in SEEDS:
            env = make(name)
            env.reset(seed)
            out[name, seed] = env
    return out


def check_transition(env, result) -> dict:
    assert isinstance(result, tuple) and len(result) == 4
    obs, reward, done, info = result
    assert isinstance(obs, str)
    assert isinstance(reward, float) and math.isfinite(reward)
    assert isinstance(done, bool)
    assert isinstance(info["success"], bool)
    n_valid, n_invalid = info["n_valid_actions"], info["n_invalid_actions"]
    assert info["action_is_valid"] == (n_valid > 0 and n_invalid == 0)
    if n_valid == 0:  # an invalid turn is counted and costs exactly the format penalty
        assert info["action_is_valid"] is False
        assert reward == pytest.approx(env.format_penalty)
        assert info["success"] is False
    return info


def test_parser_never_raises_on_random_and_adversarial_text():
    for text in TEXTS:
        parsed = parse_response(text)
        assert isinstance(parsed, ParsedResponse)
        assert isinstance(parsed.think, str) and isinstance(parsed.answer, str) and isinstance(parsed.format_valid, bool)
        assert parsed.answer in text and parsed.think in text  # stripped slices of the input, never invented
        if parsed.format_valid:
            assert "</think>" in text and "<answer>" in text and "</answer>" in text


@pytest.mark.parametrize("value", [None, b"</think><answer>Left</answer>", b"\xff\xfe\x00", 42, 3.5, ["Left"], object()])
def test_parser_accepts_non_text(value):
    parsed = parse_response(value)
    assert isinstance(parsed, ParsedResponse)


@pytest.mark.parametrize("name", ENVS)
def test_env_step_survives_random_responses(name, fresh_envs):
    """The rollout's path (parse, then step the answer or "" when the format is invalid) and raw text."""
    invalid_turns = 0
    for i, text in enumerate(TEXTS):
        seed = SEEDS[i % len(SEEDS)]
        for action in (text, parse_response(text).answer if parse_response(text).format_valid else ""):
            env = copy.deepcopy(fresh_envs[name, seed])
            if hasattr(env, "grounding"):
                score = env.grounding(parse_response(text).think)
                assert score is None or 0.0 <= score <= 1.0
            info = check_transition(env, env.step(action))
            invalid_turns += not info["action_is_valid"]
    assert invalid_turns > len(TEXTS)  # almost every fuzzed turn is invalid, and each was counted


@pytest.mark.parametrize("name", ENVS)
def test_env_step_accepts_non_text(name, fresh_envs):
    for value in (None, b"Left", 3, ["Left"]):
        env = copy.deepcopy(fresh_envs[name, 0])
        info = check_transition(env, env.step(value))  # type: ignore[arg-type]
        assert info["action_is_valid"] is False


@pytest.mark.parametrize("name", ENVS)
def test_adversarial_answers_are_invalid_and_penalised(name, fresh_envs):
    for answer in INVALID_ANSWERS["common"] + INVALID_ANSWERS[name]:
        for seed in SEEDS:
            env = copy.deepcopy(fresh_envs[name, seed])
            obs, reward, done, info = env.step(answer)
            check_transition(env, (obs, reward, done, info))
            assert info["action_is_valid"] is False, (name, answer[:40])
            assert info["n_valid_actions"] == 0, (name, answer[:40])
            assert reward == pytest.approx(env.format_penalty), (name, answer[:40])


@pytest.mark.parametrize("name", ENVS)
def test_whole_episodes_of_fuzz_end_cleanly(name):
    """Step random text until the episode ends: counters stay in bounds and done is reached."""
    rng = random.Random(name)
    for seed in SEEDS:
        env = make(name)
        env.reset(seed)
        turns = 0
        done = False
        while not done:
            text = rng.choice(TEXTS)
            action = rng.choice((text, parse_response(text).answer, "Left || Up"))
            obs, reward, done, info = env.step(action)
            check_transition(env, (obs, reward, done, info))
            turns += 1
            assert turns <= env.max_turns
        assert env.actions_taken <= env.max_actions
        with pytest.raises(RuntimeError):  # the contract: reset before stepping a finished episode
            env.step("Left")
