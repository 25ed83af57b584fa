import pytest

from agentcollapse.envs.parsing import arithmetic_claims, parse_response, split_actions


@pytest.mark.parametrize(
    "text, think, answer, valid",
    [
        ("I am at ( 0 , 1 ) . </think> <answer> Down </answer>", "I am at ( 0 , 1 ) .", "Down", True),
        ("<think> go </think><answer>Left</answer>", "go", "Left", True),
        ("no tags at all", "", "", False),
        ("reasoning </think> but no answer", "reasoning", "", False),
        ("<answer> Down </answer>", "", "Down", False),  # missing think block
        (" </think> <answer> Up </answer>", "", "Up", True),  # empty think is still well formed
        ("a </think> junk <answer> Up </answer>", "a", "Up", False),  # text between blocks
        ("a </think> <answer> Up", "a", "", False),  # answer never closed
    ],
)
def test_parse_cases(text, think, answer, valid):
    parsed = parse_response(text)
    assert (parsed.think, parsed.answer, parsed.format_valid) == (think, answer, valid)


def test_two_actions_and_limit():
    assert split_actions("Left || Down", 2) == ["Left", "Down"]
    assert split_actions("Left || Down || Up", 2) == ["Left", "Down"]
    assert split_actions(" || ", 2) == []


def test_unknown_action_is_kept_for_the_env_to_reject():
    parsed = parse_response("x </think> <answer> Fly </answer>")
    assert parsed.format_valid and split_actions(parsed.answer, 2) == ["Fly"]


def test_never_raises_on_garbage():
    for text in ["", "</think></think>", "<think><think>", "\x00\xff", "<answer></answer></think>"]:
        parsed = parse_response(text)
        assert isinstance(parsed.think, str) and isinstance(parsed.answer, str)


@pytest.mark.parametrize(
    "text, claims",
    [
        ("3 + 4 = 7 . 7 * 2 = 14 .", [True, True]),
        ("10 - 4 = 5 , 6 / 4 = 3 / 2", [False, True]),
        ("8 / 0 = 1", [False]),
        ("7 / 2 = 3", [False]),
        ("I will compute carefully", []),
    ],
)
def test_arithmetic_claims(text, claims):
    assert arithmetic_claims(text) == claims
