"""How a multi-turn context X is written (METHOD.md section 3), shared by rollouts and the warm start
so the policy is trained on exactly the text it later reads.

X = chat template over [system, user(obs_1), assistant(resp_1), user(reward_1 + obs_2), ...] with
the generation prompt, then the literal ``<think>``; generation continues from there.
"""

from __future__ import annotations

from typing import Any

THINK_OPEN = "<think>"


def first_user_message(observation: str) -> str:
    return f"Turn 1 .\n{observation}"


def next_user_message(turn: int, reward: float, observation: str) -> str:
    return f"Reward : {reward:.1f} .\nTurn {turn} .\n{observation}"


def assistant_message(response_text: str) -> str:
    """The response as it re-enters the context: generation began after ``<think>``."""
    return f"{THINK_OPEN} {response_text.strip()}"


def format_response(think: str, answer: str) -> str:
    """The text a well-formed response continues ``<think>`` with."""
    return f"{think} </think> <answer> {answer} </answer>"


def render_context(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + THINK_OPEN


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
