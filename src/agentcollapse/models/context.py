"""How a multi-turn context X is written (docs/method.md section 1), shared by rollouts and the warm start
so the policy is trained on exactly the tokens it later reads.

X = chat template over [system, user(obs_1), assistant(resp_1), user(reward_1 + obs_2), ...] with
the generation prompt, then the literal ``<think>``; generation continues from there.

Token in, token out: only the first turn's context is rendered and encoded whole. Each later context is
the previous context's ids + the response ids the policy sampled + the encoded text the template writes
after an assistant turn (end of turn, the next user message, the generation prompt, ``<think>``). A BPE
tokenizer would encode a response's text differently inside a re-rendered context; this way every
trajectory is one sequence whose tokens are exactly the sampled ones, and its KV cache a prefix.

Context modes (``rollout.context``, :func:`history_start`): ``full`` shows every past turn (the above);
``window`` the last k past turns, ``single_turn`` none. A context that shows the same past turns as the
previous one plus the turn just played is extended token in, token out; one whose first shown turn moved
(a window start) is re-rendered once from text (:func:`segment_context_ids`) and begins a new segment,
which becomes its own training sequence (``rollout.sequences``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

THINK_OPEN = "<think>"
CONTEXT_MODES = ("full", "window", "single_turn")


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


def history_start(turn: int, mode: str, turns: int = 0) -> int:
    """The first past turn (0-based) the context of ``turn`` (0-based) shows: 0 under ``full``,
    ``turn - turns`` (at least 0) under ``window`` (the last ``turns`` past turns), ``turn`` under
    ``single_turn`` (no past turn: the current user message only)."""
    if mode == "full":
        return 0
    if mode == "window":
        if turns < 1:
            raise ValueError(f"context=window needs turns >= 1 (got {turns})")
        return max(0, turn - turns)
    if mode == "single_turn":
        return turn
    raise ValueError(f"unknown context mode {mode!r}; valid: {', '.join(CONTEXT_MODES)}")


def segment_context_ids(tokenizer: Any, system_prompt: str, past: Sequence[tuple[str, str]], user_content: str) -> list[int]:
    """A context rendered from text and encoded once (a segment's start): the system prompt, each
    ``(user message, response text)`` of ``past`` as a user and an assistant turn, then
    ``user_content``. With no past turn and the first user message it is :func:`first_context_ids`."""
    messages = [{"role": "system", "content": system_prompt}]
    for user, response_text in past:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant_message(response_text)}]
    messages.append({"role": "user", "content": user_content})
    return encode(tokenizer, render_context(tokenizer, messages))


def turn_context_ids(
    tokenizer: Any,
    mode: str,
    turns: int,
    system_prompt: str,
    past: Sequence[tuple[str, str]],
    context_ids: list[int],
    response_ids: list[int],
    user_content: str,
) -> tuple[list[int], bool]:
    """The context of the turn after ``past`` (every turn played so far as ``(user message, response
    text)``; the last one read ``context_ids`` and sampled ``response_ids``) and whether it starts a new
    segment. It extends ``context_ids`` token in, token out (:func:`next_context_ids`) where it shows the
    same first past turn as that context did; otherwise it is rendered from the past turns it shows."""
    turn = len(past)
    start = history_start(turn, mode, turns)
    if turn > 0 and start == history_start(turn - 1, mode, turns):
        return next_context_ids(tokenizer, context_ids, response_ids, user_content), False
    return segment_context_ids(tokenizer, system_prompt, past[start:], user_content), True
