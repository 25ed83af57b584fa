import json
import random

import pytest

from agentcollapse import envs
from agentcollapse.config import EnvConfig
from agentcollapse.envs.searchqa.env import SearchQAEnv, exact_match, normalize_answer
from agentcollapse.errors import UserError
from agentcollapse.models.tokenizer import UNK, build_tokenizer
from agentcollapse.seeds import TRAIN_SEED_BASE

CORPUS = [
    {"id": "0", "contents": '"Mount Orvel"\nMount Orvel is a mountain in Quenland.'},
    {"id": "1", "contents": '"Quenland"\nQuenland is a country. Its capital is Dask.'},
    {"id": "2", "contents": '"Dask"\nDask is a city with a harbour.'},
]
QUESTIONS = [
    {"question": "Which country is Mount Orvel in?", "golden_answers": ["Quenland"]},
    {"question": "What is the capital of Quenland?", "golden_answers": ["Dask", "Dask City"]},
]


@pytest.fixture
def data_dir(tmp_path):
    # the held-out file holds the same two questions, so evaluation seeds 0 and 1 ask them in order
    for name, records in (("corpus.jsonl", CORPUS), ("questions.jsonl", QUESTIONS), ("questions_test.jsonl", QUESTIONS)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    return tmp_path


@pytest.fixture(scope="module")
def generated():
    return SearchQAEnv(num_passages=600, kinds=["single", "bridge", "comparison"])  # every kind, not the default single-hop


def test_answer_normalisation_is_squads():
    assert normalize_answer("  The Quick, brown-fox!  ") == "quick brownfox"
    assert normalize_answer("An Apple a day") == "apple day"
    assert exact_match("the Dask.", ["Dask City", "dask"])
    assert not exact_match("Dask harbour", ["Dask"])


def test_one_episode_step_by_step(data_dir):
    env = SearchQAEnv(data_path=str(data_dir), top_k=2, max_turns=4)
    question = "Question : Which country is Mount Orvel in?"
    assert env.reset(0) == f"{question}\nTurns left : 4 ."

    obs, reward, done, info = env.step("jump[Quenland]")
    reason = "unknown action 'jump[Quenland]': write search[query] or answer[text]"
    assert (obs, reward, done) == (f"{question}\nInvalid action : {reason} .\nTurns left : 3 .", pytest.approx(-0.1), False)
    assert info["reason"] == reason and info["action_is_valid"] is False and info["success"] is False

    obs, reward, done, info = env.step("search[  ]")
    reason = "empty query: write the words to search for inside search[...]"
    assert (obs, reward, done) == (f"{question}\nInvalid action : {reason} .\nTurns left : 2 .", pytest.approx(-0.1), False)
    assert info["reason"] == reason

    # "mount" and "orvel" occur in passage 0 only, so a top-2 search shows one passage.
    obs, reward, done, info = env.step("SEARCH[ Mount Orvel ]")
    expected = f"{question}\nResults for Mount Orvel :\n( 1 ) Mount Orvel : Mount Orvel is a mountain in Quenland.\nTurns left : 1 ."
    assert (obs, reward, done) == (expected, 0.0, False)
    assert info["action_is_valid"] is True and "reason" not in info

    obs, reward, done, info = env.step("answer[ quenland. ]")
    assert (reward, done, info["success"], info["turn"]) == (1.0, True, True, 4)
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("answer[x]")


def test_searches_rank_by_bm25_and_the_episode_ends_at_the_turn_budget(data_dir):
    env = SearchQAEnv(data_path=str(data_dir), top_k=2, max_turns=2)
    env.reset(1)  # the second question
    obs, reward, done, _ = env.step("search[Dask capital] || answer[Dask]")  # one action a turn: the answer is ignored
    lines = obs.splitlines()
    assert lines[1:4] == [
        "Results for Dask capital :",
        "( 1 ) Quenland : Quenland is a country. Its capital is Dask.",  # dask + capital beat dask x2 in a longer text
        "( 2 ) Dask : Dask is a city with a harbour.",
    ]
    assert (reward, done) == (0.0, False)
    obs, reward, done, info = env.step("search[unicorn]")
    assert "No passage matches unicorn ." in obs
    assert (reward, done, info["success"], info["action_is_valid"]) == (0.0, True, False, True)


def test_a_wrong_answer_ends_the_episode_with_zero(data_dir):
    env = SearchQAEnv(data_path=str(data_dir))
    env.reset(0)
    _, reward, done, info = env.step("answer[Dask]")
    assert (reward, done, info["success"], info["action_is_valid"]) == (0.0, True, False, True)
    assert info["reason"] == "wrong answer 'Dask'"


def test_evaluation_seeds_ask_held_out_questions_and_training_seeds_the_others(tmp_path):
    questions = [{"question": f"What is item {i} ?", "golden_answers": [f"a{i}"]} for i in range(20)]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in CORPUS))
    (tmp_path / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in questions))
    env = SearchQAEnv(data_path=str(tmp_path))
    held = {q.text for q in env.data.heldout}
    assert len(held) == 2 and len(env.data.train) == 18 and len(env.data.questions) == 20  # a tenth held out
    assert {_asked(env, seed) for seed in range(50)} == held
    assert {_asked(env, TRAIN_SEED_BASE + seed) for seed in range(50)} == {q.text for q in env.data.train}
    # a test file of its own: evaluation asks only it, training all of questions.jsonl
    own = tmp_path / "own"
    own.mkdir()
    for name in ("corpus.jsonl", "questions.jsonl"):
        (own / name).write_text((tmp_path / name).read_text())
    (own / "questions_test.jsonl").write_text(json.dumps({"question": "Held out ?", "golden_answers": ["x"]}) + "\n")
    env = SearchQAEnv(data_path=str(own))
    assert {_asked(env, seed) for seed in range(5)} == {"Held out ?"} and len(env.data.train) == 20


def _asked(env, seed):
    env.reset(seed)
    return env.question.text


@pytest.mark.parametrize(
    "action, reason",
    [
        ("", "no action"),
        ("search[]", "empty query"),
        ("search[the of and]", "no searchable words"),
        ("answer[ ]", "empty answer"),
        ("search Mount Orvel", "unknown action"),
        ("search[Mount", "unknown action"),
        ("lookup[Mount Orvel]", "unknown action"),
    ],
)
def test_invalid_actions_cost_the_format_penalty_and_the_episode_goes_on(data_dir, action, reason):
    env = SearchQAEnv(data_path=str(data_dir))
    env.reset(0)
    obs, reward, done, info = env.step(action)
    assert reason in info["reason"] and "\n" not in info["reason"]
    assert reward == pytest.approx(env.format_penalty) and done is False and info["action_is_valid"] is False
    assert f"Invalid action : {info['reason']} ." in obs


def test_grounding_checks_quotes_against_the_passages_shown(data_dir):
    env = SearchQAEnv(data_path=str(data_dir), top_k=1)
    env.reset(0)
    assert env.grounding('I read " Mount Orvel is a mountain " .') == 0.0  # nothing shown yet
    env.step("search[Mount Orvel]")
    assert env.grounding('I read " mount orvel is a MOUNTAIN in Quenland " .') == 1.0  # word by word, any case
    assert env.grounding('I read " Mount Orvel is a mountain " and " Quenland is a country " .') == 0.5  # not shown
    assert env.grounding('I read " Orvel mountain " .') == 0.0  # not in that order
    assert env.grounding("I should search and then answer .") is None
    assert env.grounding('" . "') is None


def test_the_real_data_planner_searches_the_question_then_quotes_and_answers(data_dir):
    env = SearchQAEnv(data_path=str(data_dir), top_k=2)
    env.reset(1)
    rng = random.Random(0)
    think, answer = env.demonstration(rng)
    assert answer == "search[What is the capital of Quenland?]"
    env.step(answer)
    think, answer = env.demonstration(rng)
    assert answer == "answer[Dask]"
    assert env.grounding(think) == 1.0
    assert env.step(answer)[1] == 1.0


def test_the_planner_solves_generated_questions_with_grounded_reasoning(generated):
    """Measured: 2000 of 2000 questions of the default world solved; asserted on 300 of a smaller one."""
    rng = random.Random(0)
    solved, turns, grounding = {}, [], []
    for seed in range(300):
        generated.reset(seed)
        while not generated.done:
            think, answer = generated.demonstration(rng)
            score = generated.grounding(think)
            if score is not None:
                grounding.append(score)
            generated.step(answer)
        solved.setdefault(generated.question.kind, []).append(generated.success)
        turns.append(generated.turn)
    rates = {kind: sum(v) / len(v) for kind, v in solved.items()}
    assert set(rates) == {"single", "bridge", "comparison"}
    assert min(rates.values()) >= 0.99, rates
    assert grounding and min(grounding) == 1.0  # every quote is from a passage it was shown
    assert max(turns) == 3


def test_suboptimal_and_template_turns_are_not_grounded_claims(generated):
    rng = random.Random(1)
    generated.reset(0)
    for _ in range(20):
        think, answer = generated.demonstration(rng, suboptimal_prob=1.0)
        assert generated.grounding(think) is None
        assert answer.startswith(("search[", "answer["))
    assert generated.grounding(generated.template_reasoning(rng)) is None


def test_every_word_of_a_held_out_episode_is_in_a_vocabulary_built_from_the_env(generated):
    rng = random.Random(0)
    texts = [generated.system_prompt, *generated.templates, *generated.vocabulary_texts()]
    for seed in range(30):  # a few planner episodes, as the tiny policy's build adds its demonstrations
        generated.reset(seed)
        while not generated.done:
            think, answer = generated.demonstration(rng)
            texts.append(f"{think} {answer}")
            generated.step(answer)
    tokenizer = build_tokenizer(texts)
    for seed in range(10_000, 10_020):
        obs = generated.reset(seed)
        while not generated.done:
            think, answer = generated.demonstration(rng)
            ids = tokenizer(f"{obs} {think} {answer}", add_special_tokens=False)["input_ids"]
            assert tokenizer.convert_tokens_to_ids(UNK) not in ids
            obs = generated.step(answer)[0]


def test_a_deep_copy_shares_the_index_but_not_the_episode(generated):
    import copy

    generated.reset(3)
    clone = copy.deepcopy(generated)
    assert clone.index is generated.index and clone.passages is generated.passages
    clone.step(f"search[{clone.question.hops[0].query}]")
    assert clone.shown and not generated.shown and generated.turn == 0


def test_registered_and_built_from_config(data_dir):
    assert "searchqa" in envs.available()
    env = envs.from_config(EnvConfig(name="searchqa", data_path=str(data_dir)))
    assert env.reset(0).startswith("Question : Which country is Mount Orvel in?")
    assert envs.make("searchqa", num_passages=600, top_k=2).top_k == 2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"top_k": 0}, "top_k=0"),
        ({"kinds": ["trivia"]}, "kinds="),
        ({"num_passages": 5}, "num_passages=5"),
        ({"b": 2.0}, "b=2.0"),
        ({"kinds": "trivia"}, r"kinds=\['trivia'\]"),
    ],
)
def test_bad_settings_fail_in_one_line(kwargs, message):
    with pytest.raises(UserError, match=message):
        envs.make("searchqa", **kwargs)


def test_a_missing_data_path_fails_in_one_line(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        envs.from_config(EnvConfig(name="searchqa", data_path=str(tmp_path / "nowhere")))
