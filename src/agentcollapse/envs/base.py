"""The env contract every text environment follows (tests and the rollout rely on it).

``reset(seed) -> str`` gives the first observation; ``step(action_text)`` takes the text inside
``<answer>...</answer>`` (the rollout parses responses) and returns ``(observation, reward, done,
info)`` with at least ``info["success"]`` and ``info["action_is_valid"]``. A turn that executes no
valid action earns ``format_penalty`` (docs/method.md section 6). ``render_grid()`` is the state alone.
``demonstration(rng, ...)`` is the planner's (reasoning, answer) for the current state, used to
warm-start the tiny policy and as a reference solver in tests. ``submit(action_text)`` (optional)
starts the work that the next ``step`` with that text needs, for a rollout to run a batch's in parallel.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from agentcollapse.envs.parsing import split_actions


class TextEnv(ABC):
    name: ClassVar[str]
    # constructor arguments that change how episodes run, not what they are (a cached warm start ignores them)
    runtime_kwargs: ClassVar[frozenset[str]] = frozenset()
    max_turns: int = 5
    max_actions_per_turn: int = 2
    max_actions: int = 10
    format_penalty: float = -0.1

    def __init__(self) -> None:
        self.turn = 0
        self.actions_taken = 0
        self.success = False
        self.terminal = False

    # -- contract -------------------------------------------------------------------------
    @property
    @abstractmethod
    def system_prompt(self) -> str:
        """Task instructions shown once, as the system message."""

    def reset(self, seed: int) -> str:
        self.turn = 0
        self.actions_taken = 0
        self.success = False
        self.terminal = False
        self._reset(int(seed))
        return self.observation()

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self.done:
            raise RuntimeError(f"{self.name}: step() after the episode ended; call reset(seed) first")
        self.turn += 1
        words = split_actions(action_text if isinstance(action_text, str) else "", self.max_actions_per_turn)
        reward, n_valid, n_invalid = self._act(words)
        if n_valid == 0:
            reward += self.format_penalty
        info = {
            "success": self.success,
            "action_is_valid": n_valid > 0 and n_invalid == 0,
            "n_valid_actions": n_valid,
            "n_invalid_actions": n_invalid,
            "turn": self.turn,
        }
        return self.observation(), float(reward), self.done, info

    def submit(self, action_text: str) -> None:
        """Start, without waiting, the work that ``step(action_text)`` will need, so that a rollout can
        have a whole batch's work run in parallel (and beside its decoding) before stepping the envs one
        by one; ``step`` then waits for it. DeepCoder queues the program on its sandbox's workers.
        Nothing by default: ``step`` without a ``submit`` (or with another text) does all the work."""
        return None

    @property
    def done(self) -> bool:
        return self.terminal or self.turn >= self.max_turns or self.actions_taken >= self.max_actions

    @abstractmethod
    def render_grid(self) -> str:
        """The state alone, as text (a symbol grid for grid worlds)."""

    @abstractmethod
    def observation(self) -> str:
        """What the policy reads this turn: the state in symbols plus coordinates."""

    @abstractmethod
    def demonstration(self, rng: random.Random, suboptimal_prob: float = 0.0) -> tuple[str, str]:
        """Planner reasoning (grounded in the current state, varied wording) and answer text."""

    def grounding(self, think: str) -> float | None:
        """Share of the checkable claims about the current state in ``think`` that are true, or None
        when it makes none. Retrieval accuracy can stay high while reasoning restates coordinates and
        stops saying true things about the state; this tracks the latter. Envs override it."""
        return None

    def vocabulary_texts(self) -> list[str]:
        """Text beyond the planner's episodes whose words a word-level policy (the tiny one) must be
        able to read and write: the retrieval envs' corpus, whose names a held-out episode may show
        that no demonstration did. Empty for envs whose episodes already cover their words."""
        return []

    def template_reasoning(self, rng: random.Random) -> str:
        """Input-agnostic reasoning that would fit any state (the collapse attractor)."""
        return rng.choice(self.templates)

    templates: ClassVar[tuple[str, ...]] = (
        "I should think about the best move and then act carefully .",
        "Let me consider my options and choose a good move .",
        "I will move carefully toward the goal .",
    )

    # -- env-specific ---------------------------------------------------------------------
    @abstractmethod
    def _reset(self, seed: int) -> None: ...

    # Grid worlds name their moves here and implement ``_apply``; free-answer envs override ``_act``.
    action_ids: ClassVar[dict[str, int]] = {}

    def _act(self, words: list[str]) -> tuple[float, int, int]:
        """Execute action words in order until done; return (reward, n_valid, n_invalid)."""
        reward, n_valid, n_invalid = 0.0, 0, 0
        for word in words:
            action = self.action_ids.get(word.strip().lower())
            if action is None:
                n_invalid += 1
                continue
            if self.terminal or self.actions_taken >= self.max_actions:
                break
            n_valid += 1
            self.actions_taken += 1
            reward += self._apply(action)
        return reward, n_valid, n_invalid

    def _apply(self, action: int) -> float:
        """One move of a grid world: update the state, set ``terminal``/``success``, return the reward."""
        raise NotImplementedError(f"{type(self).__name__} must implement _apply or override _act")


class SingleAnswerEnv(TextEnv):
    """One turn, one free-text answer (Countdown, Math): the whole answer is judged, not split on "||"."""

    max_turns = 1
    max_actions = 1

    def __init__(self) -> None:
        super().__init__()
        self._answer_text = ""
        self._reason: str | None = None

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        self._answer_text = action_text if isinstance(action_text, str) else ""
        self._reason = None
        observation, reward, done, info = super().step(self._answer_text)
        if self._reason is not None:
            info["reason"] = self._reason
        return observation, reward, done, info

    def _act(self, words: list[str]) -> tuple[float, int, int]:
        reward, valid, success, self._reason = self.judge(self._answer_text)
        self.actions_taken += 1
        self.terminal = True
        self.success = success
        return reward, int(valid), int(not valid)

    @abstractmethod
    def judge(self, text: str) -> tuple[float, bool, bool, str | None]:
        """(reward, is a valid answer, success, reason it fell short or None) for one answer."""
