"""Guess the number: a complete environment of your own, outside the package (README, "Your own environment").

    agentcollapse train env=custom env.target=examples/guess_number.py:GuessNumber
    agentcollapse train env=custom env.target=examples/guess_number.py:GuessNumber +env.kwargs.high=64 model=smollm2-135m

A hidden whole number in 1..``high``; each turn the agent guesses one and hears "higher" or "lower". Success
is guessing it within ``max_turns`` (halving the range needs at most log2(high) + 1 guesses). Everything a
run needs is here: the text the policy reads, the rules, and a planner's demonstration (the default tiny
policy is warm-started on it; a pretrained model needs none). The text puts spaces around punctuation, as the
built-in envs' does, because the tiny policy reads word by word.
"""

from __future__ import annotations

import random
import re

from agentcollapse.envs import TextEnv


class GuessNumber(TextEnv):
    name = "guess_number"
    max_actions_per_turn = 1  # one guess a turn

    def __init__(self, high: int = 16, max_turns: int = 6) -> None:
        super().__init__()
        if high < 2 or max_turns < 1:
            raise TypeError(f"high={high} must be at least 2 and max_turns={max_turns} at least 1")
        self.high = high
        self.max_turns = max_turns
        self.max_actions = max_turns
        self.secret, self.low, self.top, self.last, self.feedback = 1, 1, high, None, ""

    @property
    def system_prompt(self) -> str:
        return (
            f"Guess the number : a whole number from 1 to {self.high} . After each guess you hear higher or lower . "
            "Reply <think> reasoning </think> <answer> one number </answer> ."
        )

    def _reset(self, seed: int) -> None:
        self.secret = random.Random(seed).randint(1, self.high)
        self.low, self.top, self.last, self.feedback = 1, self.high, None, ""

    def _act(self, words: list[str]) -> tuple[float, int, int]:
        """(reward, valid actions, invalid actions): 1 for the right number, a guess outside 1..high is invalid."""
        guess = words[0].strip() if words else ""
        if not guess.isdigit() or not 1 <= int(guess) <= self.high:
            return 0.0, 0, 1
        self.actions_taken += 1
        self.last = int(guess)
        if self.last == self.secret:
            self.success = self.terminal = True
            self.feedback = "right"
            return 1.0, 1, 0
        if self.last < self.secret:
            self.low, self.feedback = max(self.low, self.last + 1), "higher"
        else:
            self.top, self.feedback = min(self.top, self.last - 1), "lower"
        return 0.0, 1, 0

    def render_grid(self) -> str:
        return f"The number is from {self.low} to {self.top} ."

    def observation(self) -> str:
        if self.last is None:
            return f"{self.render_grid()}\nMake your first guess ."
        return f"You guessed {self.last} : {self.feedback} .\n{self.render_grid()}"

    def demonstration(self, rng: random.Random, suboptimal_prob: float = 0.0) -> tuple[str, str]:
        """The range, then its middle (or, with ``suboptimal_prob``, any number in it)."""
        middle = (self.low + self.top) // 2
        guess = rng.randint(self.low, self.top) if rng.random() < suboptimal_prob else middle
        think = rng.choice((f"The number is from {self.low} to {self.top} .", f"It lies between {self.low} and {self.top} ."))
        think += " " + (
            rng.choice((f"The middle is {middle} .", f"Halving the range gives {middle} .")) if guess == middle else f"I try {guess} ."
        )
        return think, str(guess)

    def grounding(self, think: str) -> float | None:
        """1 when the first two numbers the reasoning names are the current range, 0 when not, None without two."""
        numbers = [int(n) for n in re.findall(r"\d+", think)]
        return None if len(numbers) < 2 else float(numbers[:2] == [self.low, self.top])

    def vocabulary_texts(self) -> list[str]:
        return [" ".join(str(n) for n in range(1, self.high + 1))]  # every number a held-out episode may need
