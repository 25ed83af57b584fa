import json

import pytest

from agentcollapse.envs.searchqa.data import load_corpus, load_dataset, load_questions, parse_contents
from agentcollapse.envs.searchqa.world import KINDS, generate_world, make_question
from agentcollapse.errors import UserError


def write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


# -- the generated world -------------------------------------------------------------------------------
def test_the_world_is_deterministic_sized_and_its_names_unique():
    a, b = generate_world(500, world_seed=3), generate_world(500, world_seed=3)
    assert a.passages == b.passages
    assert generate_world(500, world_seed=4).passages != a.passages
    assert len(a.passages) == 500
    titles = [p.title for p in a.passages]
    assert len(set(titles)) == len(titles)
    people_last = {p.name.split()[1] for p in a.people}
    assert not people_last & {c.name for c in a.cities}  # a surname is never also a city


def test_every_generated_question_is_answered_by_its_hops_passages():
    world = generate_world(600)
    kinds = set()
    for seed in range(300):
        q = make_question(world, seed)
        kinds.add(q.kind)
        assert q.hops and len(q.hops) == {"single": 1, "bridge": 2, "comparison": 2}[q.kind]
        for hop in q.hops:
            passage = world.passages[hop.passage]
            assert passage.title == hop.query
            assert hop.sentence + " ." in passage.text
            assert hop.value in hop.sentence
            assert hop.query in q.text or hop.query == q.hops[0].value  # a bridge's second hop is the first's value
        if q.kind == "bridge":
            assert q.answers == (q.hops[1].value,)
        elif q.kind == "comparison":
            years = [int(h.value) for h in q.hops]
            assert years[0] != years[1]
            assert q.answers[0] == q.hops[years.index(min(years))].query
        else:
            assert q.answers == (q.hops[0].value,)
    assert kinds == set(KINDS)
    assert {make_question(world, s, ["bridge"]).kind for s in range(20)} == {"bridge"}


def test_a_world_smaller_than_40_passages_is_refused():
    with pytest.raises(ValueError, match="num_passages=10"):
        generate_world(10)


# -- the real-data loader ------------------------------------------------------------------------------
def test_search_r1_contents_split_into_title_and_text():
    p = parse_contents('"Alan Turing"\nAlan Turing was a mathematician.')
    assert (p.title, p.text) == ("Alan Turing", "Alan Turing was a mathematician.")
    plain = parse_contents("No title here.")
    assert (plain.title, plain.text) == ("", "No title here.")


def test_a_directory_in_search_r1_format_loads(tmp_path):
    write_jsonl(
        tmp_path / "corpus.jsonl",
        [{"id": "0", "contents": '"Paris"\nParis is the capital of France.'}, "", {"id": "1", "contents": "Rome."}],
    )
    write_jsonl(
        tmp_path / "questions.jsonl",
        [
            {"id": "q0", "question": "capital of france?", "golden_answers": ["Paris", "paris, france"]},
            {"question": "x?", "golden_answers": "Rome"},
        ],
    )
    data = load_dataset(tmp_path)
    assert [p.title for p in data.passages] == ["Paris", ""]
    assert [q.answers for q in data.questions] == [("Paris", "paris, france"), ("Rome",)]
    assert {q.kind for q in data.questions} == {"real"}


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "corpus.jsonl:2: not valid JSON"),
        ("[1, 2]", "corpus.jsonl:2: expected a JSON object"),
        ('{"id": "1"}', 'corpus.jsonl:2: "contents" must be a non-empty string'),
        ('{"id": "1", "contents": "  "}', 'corpus.jsonl:2: "contents" must be a non-empty string'),
    ],
)
def test_a_malformed_corpus_line_names_file_and_line(tmp_path, line, message):
    write_jsonl(tmp_path / "corpus.jsonl", [{"id": "0", "contents": "fine"}, line])
    with pytest.raises(UserError, match=message) as info:
        load_corpus(tmp_path / "corpus.jsonl")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "record, message",
    [
        ({"golden_answers": ["a"]}, 'questions.jsonl:1: "question" must be a non-empty string'),
        ({"question": "q?"}, 'questions.jsonl:1: "golden_answers" must be a non-empty list'),
        ({"question": "q?", "golden_answers": []}, '"golden_answers" must be a non-empty list'),
        ({"question": "q?", "golden_answers": ["a", 3]}, '"golden_answers" must be a non-empty list'),
    ],
)
def test_a_malformed_question_line_names_file_and_line(tmp_path, record, message):
    write_jsonl(tmp_path / "questions.jsonl", [record])
    with pytest.raises(UserError, match=message):
        load_questions(tmp_path / "questions.jsonl")


def test_missing_paths_fail_in_one_line(tmp_path):
    with pytest.raises(UserError, match="does not exist") as info:
        load_dataset(tmp_path / "nowhere")
    assert "\n" not in str(info.value)
    with pytest.raises(UserError, match="corpus.jsonl does not exist"):
        load_dataset(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="is a file"):
        load_dataset(tmp_path / "file")
    (tmp_path / "corpus.jsonl").write_text("\n\n")
    with pytest.raises(UserError, match="holds no records"):
        load_corpus(tmp_path / "corpus.jsonl")
