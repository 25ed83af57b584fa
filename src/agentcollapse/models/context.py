"""How a multi-turn context X is written (docs/method.md section 1), shared by rollouts and the warm start
so the policy is trained on exactly the tokens it later reads.

X = chat template over [system, user(obs_1), assistant(resp_1), user(reward_1 + obs_2), ...] with
the generation prompt, then the literal ``<think>``; generation continues from there.

Token in, token out: only the first turn's context is rendered and encoded whole. Each later context is
the previous context's ids + the response ids the policy sampled + the encoded text the template writes
after an assistant turn (end of turn, the next user message, the generation prompt, ``<think>``). A BPE
tokenizer would encode a response's text differently inside a re-rendered context; this way every
trajectory is one sequence whose tokens are exactly the sampled ones, and its KV cache a prefix.
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


def first_context_ids(tokenizer: Any, system_prompt: str, observation: str) -> tuple[list[int], list[dict[str, str]]]:
    """The first turn's context ids and its messages."""
    messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": first_user_message(observation)}]
    return encode(tokenizer, render_context(tokenizer, messages)), messages


# Stands in for an assistant turn's content, to find where the template's text after it begins.
_SENTINEL = "\x00agentcollapse-response\x00"


def after_response_text(tokenizer: Any, user_content: str) -> str:
    """What the chat template writes after an assistant turn's content, up to where the next response
    begins: end of turn, ``user_content`` as the next user message, the generation prompt, ``<think>``."""
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": _SENTINEL},
        {"role": "user", "content": user_content},
    ]
    text = render_context(tokenizer, messages)
    if text.count(_SENTINEL) != 1:
        raise ValueError("the chat template does not write an assistant message's content verbatim; multi-turn contexts need it to")
    return text[text.index(_SENTINEL) + len(_SENTINEL) :]


def next_context_ids(tokenizer: Any, context_ids: list[int], response_ids: list[int], user_content: str) -> list[int]:
    """The next turn's context: ``context_ids`` + ``response_ids`` as sampled + the template's text after
    them (:func:`after_response_text`), whose end-of-turn token is left out when the response already
    ended with it (EOS)."""
    text = after_response_text(tokenizer, user_content)
    eos = tokenizer.eos_token
    if response_ids and eos and response_ids[-1] == tokenizer.eos_token_id and text.startswith(eos):
        text = text[len(eos) :]
    return list(context_ids) + list(response_ids) + encode(tokenizer, text)


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
