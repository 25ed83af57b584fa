"""bench_experiment's arms: NAME=SWEEP@ENV pairs, the first the baseline, bad ones named with the fix."""

import argparse

import pytest

from benchmarks.bench_experiment import parse_arms


def test_arms_keep_their_order_and_the_first_is_the_baseline():
    arms = parse_arms("prereg=smollm2_prereg@frozenlake, ppo_sokoban=smollm2_ppo_sokoban@sokoban")
    assert list(arms.items()) == [("prereg", ("smollm2_prereg", "frozenlake")), ("ppo_sokoban", ("smollm2_ppo_sokoban", "sokoban"))]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("prereg=smollm2_prereg", "an arm is NAME=SWEEP@ENV"),
        ("a=smollm2_prereg@frozenlake,b=no_such_sweep@sokoban", "arm 'b': no sweep file sweeps/no_such_sweep.yaml"),
        ("a=smollm2_prereg@frozenlake", "give at least two arms"),
    ],
)
def test_a_bad_arm_says_what_an_arm_is(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse_arms(text)
