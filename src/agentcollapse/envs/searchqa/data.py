"""SearchQA's data: the passages and questions an episode searches and answers, and the loader of a
real corpus from ``env.data_path`` (the generated world is ``world.py``).

``env.data_path`` names a directory holding two JSON Lines files, one object a line:

- ``corpus.jsonl``: Search-R1's retrieval corpus (its ``wiki-18.jsonl``), ``{"id": ..., "contents": ...}``
  where ``contents`` is ``"Title"\\ntext`` (the title in double quotes on the first line, as Search-R1
  writes it) or plain text (then the title is empty). Extra keys are ignored.
- ``questions.jsonl``: NQ / HotpotQA-style questions as Search-R1's data sets carry them,
  ``{"question": ..., "golden_answers": [...]}`` (a single string answer is accepted too). Extra keys
  (``id``, ``data_source`` ...) are ignored.
- ``questions_test.jsonl`` (optional, same format): the held-out questions evaluation episodes ask
  (e.g. Search-R1's test split); without it a tenth of ``questions.jsonl`` is held out (``envs.splits``).

A malformed line fails with one line naming the file, the line number and what is wrong; blank lines
are skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from agentcollapse.envs.splits import split_by_hash
from agentcollapse.errors import UserError

CORPUS_FILE = "corpus.jsonl"
QUESTIONS_FILE = "questions.jsonl"
TEST_QUESTIONS_FILE = "questions_test.jsonl"


@dataclass(frozen=True)
class Passage:
    title: str
    text: str

    def index_text(self) -> str:
        """What BM25 indexes: the title, then the text."""
        return f"{self.title} {self.text}" if self.title else self.text


@dataclass(frozen=True)
class Hop:
    """One search the planner makes: the entity it searches, the passage that answers it (its index in
    the corpus), the sentence of that passage it quotes and the value it reads there."""

    query: str
    passage: int
    sentence: str
    value: str


@dataclass(frozen=True)
class Question:
    text: str
    answers: tuple[str, ...]  # any of them, after normalisation, is right
    kind: str  # single | bridge | comparison (generated) | real (loaded)
    hops: tuple[Hop, ...] = ()  # the planner's searches (generated questions); empty for real ones
    conclusion: str = ""  # how the last hop's value becomes the answer (comparison questions)


@dataclass
class Dataset:
    passages: list[Passage]
    questions: list[Question] = field(default_factory=list)  # real data: every question; generated: empty (drawn per seed)
    source: str = "generated"
    train: list[Question] = field(default_factory=list)  # real data: what training episodes ask
    heldout: list[Question] = field(default_factory=list)  # real data: what evaluation episodes ask


def _records(path: Path) -> list[tuple[int, dict]]:
    if not path.is_file():
        raise UserError(f"env.data_path: {path} does not exist; it needs {CORPUS_FILE} and {QUESTIONS_FILE} (see README, SearchQA)")
    out = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(record, dict):
                raise UserError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            out.append((number, record))
    if not out:
        raise UserError(f"{path} holds no records")
    return out


def parse_contents(contents: str) -> Passage:
    """A Search-R1 ``contents`` string as (title, text): ``"Title"\\ntext`` or plain text."""
    first, sep, rest = contents.partition("\n")
    first = first.strip()
    if sep and len(first) >= 2 and first.startswith('"') and first.endswith('"'):
        return Passage(title=first[1:-1].strip(), text=rest.strip())
    return Passage(title="", text=contents.strip())


def load_corpus(path: str | Path) -> list[Passage]:
    """The passages of a Search-R1 corpus file (``{"id", "contents"}`` per line)."""
    passages = []
    for number, record in _records(Path(path)):
        contents = record.get("contents")
        if not isinstance(contents, str) or not contents.strip():
            raise UserError(f'{path}:{number}: "contents" must be a non-empty string (Search-R1 corpus format: {{"id", "contents"}})')
        passages.append(parse_contents(contents))
    return passages


def load_questions(path: str | Path) -> list[Question]:
    """The questions of an NQ/HotpotQA-style file (``{"question", "golden_answers"}`` per line)."""
    questions = []
    for number, record in _records(Path(path)):
        text, answers = record.get("question"), record.get("golden_answers")
        if not isinstance(text, str) or not text.strip():
            raise UserError(f'{path}:{number}: "question" must be a non-empty string')
        if isinstance(answers, str):
            answers = [answers]
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
            raise UserError(f'{path}:{number}: "golden_answers" must be a non-empty list of non-empty strings')
        questions.append(Question(text=text.strip(), answers=tuple(a.strip() for a in answers), kind="real"))
    return questions


def load_dataset(data_path: str | Path) -> Dataset:
    """The real corpus and questions of the directory ``data_path`` (see the module doc)."""
    root = Path(data_path).expanduser()
    if not root.exists():
        raise UserError(f"env.data_path={data_path} does not exist; point it at a directory with {CORPUS_FILE} and {QUESTIONS_FILE}")
    if not root.is_dir():
        raise UserError(f"env.data_path={data_path} is a file; point it at a directory with {CORPUS_FILE} and {QUESTIONS_FILE}")
    passages, questions = load_corpus(root / CORPUS_FILE), load_questions(root / QUESTIONS_FILE)
    if (root / TEST_QUESTIONS_FILE).is_file():
        train, heldout = questions, load_questions(root / TEST_QUESTIONS_FILE)
        questions = questions + heldout
    else:
        train, heldout = split_by_hash(questions, lambda q: q.text)
    return Dataset(passages=passages, questions=questions, source=str(root), train=train, heldout=heldout)


__all__ = ["CORPUS_FILE", "QUESTIONS_FILE", "Dataset", "Hop", "Passage", "Question", "load_corpus", "load_dataset", "load_questions"]
