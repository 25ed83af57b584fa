"""SearchQA (Search-R1 style): answer a question by searching a passage corpus with BM25.

Each turn the agent writes one action inside ``<answer>``:

- ``search[query]``: the ``top_k`` best passages for ``query`` (``envs.retrieval.BM25Index``) are the
  next observation; reward 0.
- ``answer[text]``: ends the episode; reward 1 when ``text`` equals one of the question's answers after
  the usual normalisation (SQuAD's / Search-R1's: lower case, punctuation and the articles a, an, the
  removed, whitespace collapsed), else 0. Success = reward 1.

The episode also ends after ``max_turns`` turns (reward 0 if it never answered). A turn whose action
is not one of the two, a search with no words to search for, or an empty answer executes no valid
action: reward 0 plus the format penalty, with a one-line ``info["reason"]``, and the episode goes on.

Data: by default a generated world (``world.py``: invented entities, one passage each, ``num_passages``
of them) and a question drawn per seed from it, single-hop, bridge (two-hop) or comparison; with
``data_path``, a real corpus and question file (``data.py``: Search-R1's format): an evaluation
seed asks held-out question ``seed mod N``, a training seed one of the others (``envs.splits``). The corpus and its index are built once per process and shared by every env instance.

The planner (``demonstration``) searches each entity the question needs, in order, reading the
passage that answers it, quoting the sentence it read between double quotes, and answers. ``grounding``
checks those quotes: each quoted span is a claim, true when its words appear, in order, in a passage the
agent has been shown this episode.
"""

from __future__ import annotations

import copy
import functools
import random
import re
import string
from collections.abc import Sequence
from typing import Any, ClassVar

from agentcollapse.config.env_kwargs import SearchQAKwargs
from agentcollapse.envs import register
from agentcollapse.envs.base import TextEnv
from agentcollapse.envs.retrieval import BM25Index
from agentcollapse.envs.searchqa.data import Dataset, Passage, Question, load_dataset
from agentcollapse.envs.searchqa.world import KINDS, World, generate_world, make_question
from agentcollapse.envs.splits import is_held_out_seed
from agentcollapse.errors import UserError

_ACTION = re.compile(r"^\s*(search|answer)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_QUOTE = re.compile(r'"([^"]*)"')
_WORDS = re.compile(r"\w+")
VOCABULARY_PASSAGES = 20000  # a real corpus's passages whose words the tiny policy's vocabulary takes


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation: lower case, punctuation removed, articles removed, whitespace collapsed."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, answers: Sequence[str]) -> bool:
    """Whether ``prediction`` equals one of ``answers`` after :func:`normalize_answer`."""
    guess = normalize_answer(prediction)
    return any(guess == normalize_answer(a) for a in answers)


def _plain_words(text: str) -> str:
    """Lower-case words joined by single spaces, padded with spaces (for whole-word containment)."""
    return " " + " ".join(_WORDS.findall(text.lower())) + " "


@functools.lru_cache(maxsize=4)
def _generated(num_passages: int, world_seed: int, k1: float, b: float) -> tuple[World, BM25Index]:
    world = generate_world(num_passages, world_seed)
    return world, BM25Index([p.index_text() for p in world.passages], k1=k1, b=b)


@functools.lru_cache(maxsize=2)
def _loaded(data_path: str, k1: float, b: float) -> tuple[Dataset, BM25Index]:
    data = load_dataset(data_path)
    return data, BM25Index([p.index_text() for p in data.passages], k1=k1, b=b)


_D = SearchQAKwargs()  # the constructor's defaults: their one source (conf/env/searchqa.yaml composes the same)


@register("searchqa")
class SearchQAEnv(TextEnv):
    name = "searchqa"
    max_actions_per_turn = 1
    templates: ClassVar[tuple[str, ...]] = (
        "I should search for what the question asks and then answer .",
        "Let me look this up and give the answer .",
        "I will search first and answer when I know .",
    )

    def __init__(
        self,
        num_passages: int = _D.num_passages,
        world_seed: int = _D.world_seed,
        kinds: Sequence[str] = tuple(_D.kinds),
        top_k: int = _D.top_k,
        max_turns: int = _D.max_turns,
        max_passage_words: int = _D.max_passage_words,
        k1: float = _D.k1,
        b: float = _D.b,
        data_path: str | None = None,
    ) -> None:
        super().__init__()
        if top_k < 1 or max_turns < 1 or max_passage_words < 1:
            raise UserError(f"env.kwargs top_k={top_k}, max_turns={max_turns} and max_passage_words={max_passage_words} must be >= 1")
        kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
        if not kinds or any(k not in KINDS for k in kinds):
            raise UserError(f"env.kwargs kinds={list(kinds)} must be a non-empty list of {', '.join(KINDS)}")
        if num_passages < 40:
            raise UserError(f"env.kwargs num_passages={num_passages} must be >= 40")
        if k1 < 0 or not 0 <= b <= 1:
            raise UserError(f"env.kwargs k1={k1} must be >= 0 and b={b} in [0, 1] (BM25)")
        self.top_k, self.max_turns, self.max_actions = int(top_k), int(max_turns), int(max_turns)
        self.max_passage_words, self.kinds = int(max_passage_words), kinds
        self.world: World | None = None
        if data_path is not None:
            self.data, self.index = _loaded(str(data_path), float(k1), float(b))
        else:
            self.world, self.index = _generated(int(num_passages), int(world_seed), float(k1), float(b))
            self.data = self.world.dataset()
        self.passages: list[Passage] = self.data.passages
        self.question = Question("", (), "single")
        self.shown: list[int] = []  # passages shown this episode, first showing first
        self.results: list[int] = []  # the last search's passages
        self.last_query: str | None = None
        self._reason: str | None = None

    def __deepcopy__(self, memo: dict) -> SearchQAEnv:
        """A copy of the episode's state that shares the corpus and its index (read-only, and built once)."""
        clone = copy.copy(self)
        clone.shown, clone.results = list(self.shown), list(self.results)
        return clone

    # -- episode --------------------------------------------------------------------------
    def _reset(self, seed: int) -> None:
        if self.world is not None:
            self.question = make_question(self.world, seed, self.kinds)
        else:
            pool = self.data.heldout if is_held_out_seed(seed) else self.data.train
            self.question = pool[seed % len(pool)]
        self.shown, self.results, self.last_query, self._reason = [], [], None, None

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        self._reason = None
        observation, reward, done, info = super().step(action_text)
        if self._reason is not None:
            info["reason"] = self._reason
        return observation, reward, done, info

    def _act(self, words: list[str]) -> tuple[float, int, int]:
        self.actions_taken += 1
        if not words:
            self._reason = "no action: write search[query] or answer[text]"
            return 0.0, 0, 1
        match = _ACTION.match(words[0])
        if match is None:
            self._reason = f"unknown action {words[0][:40]!r}: write search[query] or answer[text]"
            return 0.0, 0, 1
        verb, argument = match.group(1).lower(), match.group(2).strip()
        if verb == "answer":
            if not argument:
                self._reason = "empty answer: write the answer inside answer[...]"
                return 0.0, 0, 1
            self.terminal = True
            self.success = exact_match(argument, self.question.answers)
            if not self.success:
                self._reason = f"wrong answer {argument[:40]!r}"
            return (1.0 if self.success else 0.0), 1, 0
        try:
            hits = self.index.search(argument, self.top_k)
        except ValueError as exc:  # an empty query, or one of stopwords only
            self._reason = f"{exc}: write the words to search for inside search[...]"
            return 0.0, 0, 1
        self.last_query, self.results = argument, [i for i, _ in hits]
        self.shown += [i for i in self.results if i not in self.shown]
        return 0.0, 1, 0

    # -- text -----------------------------------------------------------------------------
    @property
    def system_prompt(self) -> str:
        return (
            "You answer questions by searching a collection of passages . Each turn , either search with "
            "<answer> search[ words to search for ] </answer> , which shows the best matching passages , or answer with "
            "<answer> answer[ the answer ] </answer> , which ends the game . The answer must come from the passages . "
            "Answer with <think> your reasoning </think> <answer> one action </answer> ."
        )

    def passage_text(self, index: int) -> str:
        """A passage as the observation shows it: its title, then at most ``max_passage_words`` words."""
        passage = self.passages[index]
        words = passage.text.split()
        text = " ".join(words[: self.max_passage_words]) + (" ..." if len(words) > self.max_passage_words else "")
        return f"{passage.title} : {text}" if passage.title else text

    def render_grid(self) -> str:
        lines = [f"Question : {self.question.text}"]
        if self.last_query is not None:
            if self.results:
                lines.append(f"Results for {self.last_query} :")
                lines += [f"( {n} ) {self.passage_text(i)}" for n, i in enumerate(self.results, start=1)]
            else:
                lines.append(f"No passage matches {self.last_query} .")
        return "\n".join(lines)

    def observation(self) -> str:
        left = max(0, self.max_turns - self.turn)
        status = f"Invalid action : {self._reason} .\n" if self._reason is not None and not self.terminal else ""
        return f"{self.render_grid()}\n{status}Turns left : {left} ."

    def vocabulary_texts(self) -> list[str]:
        """Text whose words a word-level policy (the tiny one) needs: every passage of a generated
        world, or the questions, answers and first passages of a real corpus."""
        passages = self.passages if self.world is not None else self.passages[:VOCABULARY_PASSAGES]
        texts = [self.observation(), "Results for ( 1 ) No passage matches . Invalid action : wrong answer ..."]
        texts += [f"{p.title} {p.text}" for p in passages]
        if self.world is not None:  # the question templates' words
            texts += [make_question(self.world, seed, self.kinds).text for seed in range(200)]
        texts += [f"{q.text} {' '.join(q.answers)}" for q in self.data.questions]
        return texts

    # -- planner --------------------------------------------------------------------------
    def demonstration(self, rng: random.Random, suboptimal_prob: float = 0.0) -> tuple[str, str]:
        """The planner's turn: quote what the last search showed about the entity it searched, then
        search the next entity the question needs, or answer once every one has been read. With
        ``suboptimal_prob``: a random search or a guessed answer instead, said as such."""
        if rng.random() < suboptimal_prob:
            return self._random_action(rng)
        if not self.question.hops:
            return self._real_demonstration(rng)
        found = [h for h in self.question.hops if h.passage in self.results]
        searched = [h for h in found if h.query == self.last_query]
        quotes = [f'" {h.sentence} "' for h in (searched or found)[:1]]
        read = " ".join(f"{rng.choice(('I read', 'The passage says', 'It says'))} {q} ." for q in quotes)
        pending = [h for h in self.question.hops if h.passage not in self.shown]
        if pending and self.max_turns - self.turn > 1:
            hop = pending[0]
            plan = rng.choice((f"Next I search {hop.query} .", f"Now I need {hop.query} .", f"I should look up {hop.query} ."))
            return " ".join(part for part in (read, plan) if part), f"search[{hop.query}]"
        answer = self.question.answers[0]
        if self.question.kind == "comparison":
            a, b = self.question.hops
            because = f"{a.query} {a.value} , {b.query} {b.value} ; the earlier is {answer} ."
        else:
            because = rng.choice((f"So the answer is {answer} .", f"The answer is {answer} .", f"That gives {answer} ."))
        return " ".join(part for part in (read, because) if part), f"answer[{answer}]"

    def _real_demonstration(self, rng: random.Random) -> tuple[str, str]:
        """A real question: search its words, then answer, quoting the passage that holds a golden answer."""
        if self.last_query is None and self.max_turns - self.turn > 1:
            return rng.choice(("I should search the question .", "Let me search for the question first .")), f"search[{self.question.text}]"
        answer = self.question.answers[0]
        for i in self.results:
            text = self.passage_text(i)
            for gold in self.question.answers:
                if _plain_words(gold).strip() and _plain_words(gold) in _plain_words(text):
                    return f'I read " {_window(text, gold)} " . So the answer is {gold} .', f"answer[{gold}]"
        return f"The passages do not say it ; I answer {answer} .", f"answer[{answer}]"

    def _random_action(self, rng: random.Random) -> tuple[str, str]:
        titles = [self.passages[i].title for i in self.results if self.passages[i].title]
        if titles and rng.random() < 0.5:
            guess = rng.choice(titles)
            return f"I guess {guess} .", f"answer[{guess}]"
        pick = self.passages[rng.randrange(len(self.passages))].title or "answer"
        return f"I will try searching {pick} .", f"search[{pick}]"

    # -- grounding ------------------------------------------------------------------------
    def grounding(self, think: str) -> float | None:
        """Share of quoted spans (between double quotes) whose words appear, in order, in a passage
        shown this episode; None when the reasoning quotes nothing."""
        quotes = [q for q in _QUOTE.findall(think) if _WORDS.search(q)]
        if not quotes:
            return None
        shown = [_plain_words(self.passage_text(i)) for i in self.shown]
        claims = [any(_plain_words(q) in text for text in shown) for q in quotes]
        return sum(claims) / len(claims)


def _window(text: str, answer: str, width: int = 8) -> str:
    """The words of ``text`` from ``width`` before the first whole-word occurrence of ``answer`` to
    ``width`` after it (punctuation dropped: a quote is checked word by word)."""
    words = _WORDS.findall(text)
    lower = [w.lower() for w in words]
    target = _WORDS.findall(answer.lower())
    for start in range(len(words) - len(target) + 1):
        if lower[start : start + len(target)] == target:
            return " ".join(words[max(0, start - width) : start + len(target) + width])
    return " ".join(words[: 2 * width])


__all__ = ["SearchQAEnv", "exact_match", "normalize_answer"]
