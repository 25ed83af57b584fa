"""WebShop env: one episode played step by step on a small catalogue in the original's file format
(every observation and reward checked), bad actions, the turn budget, the real-data loader's errors,
the generated catalogue, and the planner as the reference solver."""

from __future__ import annotations

import json
import random
import statistics

import pytest

from agentcollapse import envs
from agentcollapse.config import EnvConfig
from agentcollapse.envs.webshop.data import generate_catalogue, generated_goal, goal_for, load_catalogue
from agentcollapse.envs.webshop.env import WebShopEnv
from agentcollapse.errors import UserError
from agentcollapse.seeds import TRAIN_SEED_BASE

PRODUCTS = [
    {
        "asin": "A1",
        "name": "Acme cotton shirt",
        "category": "clothing",
        "query": "Shirt",
        "product_category": "Clothing › Men › Shirts",
        "full_description": "soft cotton for every day",
        "small_description": ["crew neck"],
        "pricing": "$15.50",
        "customization_options": {"Size": [{"value": "S"}, {"value": "M"}], "Color": [{"value": "Navy/White"}, {"value": "Red"}]},
        "images": ["x.jpg"],
    },
    {
        "asin": "A2",
        "name": "Acme wool shirt",
        "category": "clothing",
        "query": "shirt",
        "product_category": "Clothing › Men › Shirts",
        "full_description": "warm",
        "small_description": "long sleeve",
        "pricing": "$30.00 - $45.00",
        "customization_options": {"Size": [{"value": "S"}, {"value": "L"}]},
    },
    {"asin": "A3", "name": "Brill desk lamp", "category": "home", "query": "lamp", "product_category": "Home › Lighting", "pricing": ""},
    {"asin": "nan", "name": "skipped: the original drops asin nan"},
]
INSTRUCTIONS = {
    "A1": [
        {
            "instruction": "i want a cotton shirt in navy white, size m.",
            "instruction_attributes": ["cotton"],
            "instruction_options": ["M", "navy | white"],
        },
        {"instruction": "no attributes: skipped as in the original", "instruction_attributes": [], "instruction_options": []},
    ]
}


def write_data(root, products=PRODUCTS, instructions=INSTRUCTIONS):
    root.mkdir(exist_ok=True)
    (root / "items_shuffle_1000.json").write_text(json.dumps(products))
    (root / "items_human_ins.json").write_text(json.dumps(instructions))
    return root


@pytest.fixture
def shop(tmp_path):
    return WebShopEnv(data_path=str(write_data(tmp_path / "data")), results_per_page=1, max_turns=10)


def test_one_episode_step_by_step(shop):
    obs = shop.reset(0)
    cap = shop.goal.price_upper
    assert cap in (30.0, 40.0, 50.0)  # the larger of two of 20, 30, 40, 50 (the multiples of 10 above $15.50)
    instruction = f"i want a cotton shirt in navy white, size m, and price lower than {cap:.2f} dollars"
    head = f"Instruction: [SEP] {instruction}"
    results_actions = "\nActions: click[ item id ] , click[ next > ] , click[ < prev ] , click[ back to search ]"
    item_actions = "\nActions: click[ option ] , click[ buy now ] , click[ < prev ] , click[ back to search ]"
    assert obs == f"WebShop [SEP] {head} [SEP] Search\nActions: search[ query ]"

    page1 = f"{head} [SEP] Back to Search [SEP] Page 1 (Total results: 2) [SEP] Next > [SEP] A1 [SEP] Acme cotton shirt [SEP] $15.50"
    page2 = f"{head} [SEP] Back to Search [SEP] Page 2 (Total results: 2) [SEP] < Prev [SEP] A2 [SEP] Acme wool shirt [SEP] $30.00"
    item = (
        f"{head} [SEP] Back to Search [SEP] < Prev [SEP] size [SEP] s [SEP] m [SEP] color [SEP] navy | white [SEP] red"
        " [SEP] Acme cotton shirt [SEP] Price: $15.50 [SEP] Buy Now"
    )
    steps = [  # action, observation, reward, valid
        ("search[cotton shirt]", page1 + results_actions, 0.0, True),  # A1 has cotton twice and shirt; A2 shirt only; the lamp neither
        ("click[next >]", page2 + results_actions, 0.0, True),
        ("click[A1]", page2 + results_actions, -0.1, False),  # A1 is on page 1, not this one
        ("click[< prev]", page1 + results_actions, 0.0, True),
        ("click[a1]", item + item_actions, 0.0, True),  # ids are matched case-insensitively
        ("click[ M ]", "You have clicked m.\n" + item + item_actions, 0.0, True),
        ("click[navy | white]", "You have clicked m and navy | white.\n" + item + item_actions, 0.0, True),
        # type 1 (same query) x (cotton in the title + size m + navy | white + price) / (1 + 2 + 1) = 1
        ("click[buy now]", "Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] 1.00\nActions: none", 1.0, True),
    ]
    for turn, (action, want_obs, want_reward, valid) in enumerate(steps, start=1):
        obs, reward, done, info = shop.step(action)
        assert obs == want_obs, action
        assert reward == pytest.approx(want_reward), action
        assert info["action_is_valid"] is valid and info["turn"] == turn, action
        assert ("reason" in info) is (not valid), action
        assert done is (turn == len(steps)), action
    assert info["success"] is True and info["reward_parts"] == {"r_type": 1.0, "attributes": 1, "options": 2, "price_ok": True}


def test_a_wrong_option_and_the_back_button(shop):
    shop.reset(0)
    for action in ("search[shirt]", "click[a2]", "click[back to search]", "search[cotton]", "click[a1]", "click[red]"):
        _, reward, done, info = shop.step(action)
        assert info["action_is_valid"] and reward == 0.0 and not done, action
    _, reward, done, info = shop.step("click[buy now]")
    # (cotton + no goal option among {red} + price) / 4 = 0.5
    assert done and reward == pytest.approx(0.5) and info["success"] is False


@pytest.mark.parametrize(
    ("page_actions", "bad", "reason"),
    [
        ((), "jump[now]", "not an action"),
        ((), "click on it", "not an action"),
        ((), "search[]", "empty search"),
        ((), "search[   ]", "empty search"),
        ((), "search[the of is]", "no searchable words"),
        ((), "click[A1]", "not on this search page"),
        (("search[shirt]",), "search[lamp]", "search page only"),
        (("search[shirt]",), "click[buy now]", "not on this results page"),
        (("search[cotton]", "click[a1]"), "click[xl]", "not on this item page"),
        ((), "", "no action"),
    ],
)
def test_bad_actions_cost_the_format_penalty_and_the_episode_goes_on(shop, page_actions, bad, reason):
    shop.reset(0)
    for action in page_actions:
        shop.step(action)
    before = shop.observation()
    obs, reward, done, info = shop.step(bad)
    assert reward == pytest.approx(shop.format_penalty) and not done
    assert info["action_is_valid"] is False and reason in info["reason"] and "\n" not in info["reason"]
    assert obs == before


def test_turn_budget_ends_without_a_purchase(tmp_path):
    env = WebShopEnv(data_path=str(write_data(tmp_path / "d")), max_turns=2)
    env.reset(0)
    env.step("search[shirt]")
    _, reward, done, info = env.step("click[a1]")
    assert done and reward == 0.0 and info["success"] is False
    with pytest.raises(RuntimeError):
        env.step("click[buy now]")


def test_only_the_first_action_of_a_turn_runs(shop):
    shop.reset(0)
    _, _, _, info = shop.step("search[shirt] || click[a1]")
    assert info["n_valid_actions"] == 1 and shop.page == "results"


# -- real-data loader --------------------------------------------------------------------------
def test_loader_reads_the_original_format(tmp_path):
    catalogue = load_catalogue(1, 0, str(write_data(tmp_path / "real")))
    assert [p.asin for p in catalogue.products] == ["A1", "A2", "A3"]
    a1, a2, a3 = catalogue.products
    assert a1.options == {"size": ("s", "m"), "color": ("navy | white", "red")} and a1.query == "shirt"
    assert (a1.price, a2.price, a3.price) == (15.5, 30.0, 100.0)  # first listed price; none -> $100
    assert a2.bullet_points == ("long sleeve",) and a1.bullet_points == ("crew neck",)
    assert len(catalogue.goals) == 1 and catalogue.goals[0].options == ("m", "navy | white")


def test_evaluation_seeds_ask_held_out_instructions_and_training_seeds_the_others(tmp_path):
    goal = INSTRUCTIONS["A1"][0]
    many = {"A1": [dict(goal, instruction=f"i want a cotton shirt number {i}, size m.") for i in range(20)]}
    catalogue = load_catalogue(1, 0, str(write_data(tmp_path / "many", instructions=many)))
    held = {g.instruction for g in catalogue.heldout_goals}
    assert len(held) == 2 and len(catalogue.train_goals) == 18 and len(catalogue.goals) == 20  # a tenth held out
    assert {goal_for(catalogue, seed).instruction for seed in range(50)} == held
    assert {goal_for(catalogue, TRAIN_SEED_BASE + seed).instruction for seed in range(50)} == {g.instruction for g in catalogue.train_goals}


def test_loader_reads_the_optional_attribute_file(tmp_path):
    root = write_data(tmp_path / "attrs")
    (root / "items_ins_v2_1000.json").write_text(json.dumps({"A1": {"attributes": ["cotton", "crew neck"]}}))
    assert load_catalogue(1, 0, str(root)).products[0].attributes == ("cotton", "crew neck")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda root: (root / "items_shuffle_1000.json").write_text('[{"asin": "A1",\n "name": }]'),
            "items_shuffle_1000.json: line 2 column 10: not valid JSON",
        ),
        (
            lambda root: (root / "items_shuffle_1000.json").write_text(json.dumps([{"asin": "A1"}])),
            "product 0 (asin A1): 'name' must be text, got nothing",
        ),
        (lambda root: (root / "items_shuffle_1000.json").write_text(json.dumps({"asin": "A1"})), "must be a JSON list of products"),
        (
            lambda root: (root / "items_shuffle_1000.json").write_text(json.dumps([{"asin": "A1", "name": "x", "pricing": "free"}])),
            "product 0 (asin A1): 'pricing' 'free' has no price",
        ),
        (
            lambda root: (root / "items_shuffle_1000.json").write_text(
                json.dumps([{"asin": "A1", "name": "x", "customization_options": {"size": ["S"]}}])
            ),
            "option 'size' must be a list of objects with a text 'value'",
        ),
        (
            lambda root: (root / "items_human_ins.json").write_text(json.dumps({"A1": {"instruction": "x"}})),
            "asin A1: must be a list of instructions",
        ),
        (
            lambda root: (root / "items_human_ins.json").write_text(json.dumps({"A1": [{"instruction_attributes": ["a"]}]})),
            "asin A1 instruction 0: 'instruction' must be text",
        ),
        (lambda root: (root / "items_human_ins.json").write_text(json.dumps({"ZZ": []})), "no usable instruction"),
        (lambda root: (root / "items_human_ins.json").unlink(), "has no items_human_ins.json"),
        (lambda root: (root / "items_shuffle_1000.json").unlink(), "has no items_shuffle_1000.json or items_shuffle.json"),
    ],
)
def test_a_malformed_data_directory_is_one_line(tmp_path, mutate, message):
    root = write_data(tmp_path / "bad")
    mutate(root)
    with pytest.raises(UserError) as exc:
        WebShopEnv(data_path=str(root))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_a_missing_data_path_is_one_line(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        envs.from_config(EnvConfig(name="webshop", data_path=str(tmp_path / "nowhere")))


def test_bad_settings_are_one_line():
    with pytest.raises(UserError, match="results_per_page"):
        WebShopEnv(num_products=10, results_per_page=0)
    with pytest.raises(UserError, match="num_products"):
        WebShopEnv(num_products=0)


# -- generated data and the planner --------------------------------------------------------------
def test_generated_catalogue_is_deterministic_and_goals_are_satisfiable():
    a, b = generate_catalogue(300, seed=3), generate_catalogue(300, seed=3)
    assert a == b and a != generate_catalogue(300, seed=4)
    for seed in range(50):
        goal = generated_goal(a, seed)
        target = next(p for p in a if p.asin == goal.asin)
        assert set(goal.attributes) <= set(target.attributes) and goal.price_upper > target.price
        assert all(any(v in values for values in target.options.values()) for v in goal.options)
        assert goal.query in goal.instruction and f"{goal.price_upper:.2f} dollars" in goal.instruction


def test_goal_size_is_a_knob_whose_default_is_the_headroom_setting_and_the_original_one_override_away():
    catalogue = generate_catalogue(300, seed=3)
    easy = [generated_goal(catalogue, seed, max_attributes=1, max_options=0) for seed in range(50)]
    assert all(len(g.attributes) == 1 and not g.options and " with " not in g.instruction for g in easy)
    some = [generated_goal(catalogue, seed, max_attributes=2, max_options=1) for seed in range(50)]
    assert {len(g.attributes) for g in some} == {1, 2} and {len(g.options) for g in some} == {1}
    # the original's draws: 1-3 attributes, 1-2 options; the same product whatever the knobs (drawn first)
    original = [generated_goal(catalogue, seed) for seed in range(50)]
    assert {len(g.attributes) for g in original} == {1, 2, 3} and {len(g.options) for g in original} == {1, 2}
    assert [g.asin for g in original] == [g.asin for g in some]
    kwargs = {"num_products": 300, "catalogue_seed": 3}
    env = envs.from_config(EnvConfig(name="webshop", kwargs=kwargs))
    env.reset(7)
    assert env.goal == generated_goal(catalogue, 7, 1, 0)  # the default: one attribute, no options
    env = envs.from_config(EnvConfig(name="webshop", kwargs={**kwargs, "max_goal_attributes": 3, "max_goal_options": 2}))
    env.reset(7)
    assert env.goal == generated_goal(catalogue, 7)
    with pytest.raises(UserError, match="max_goal_attributes=0 must be an integer >= 1"):
        WebShopEnv(num_products=10, max_goal_attributes=0)
    with pytest.raises(UserError, match="max_goal_options=-1 must be an integer >= 0"):
        WebShopEnv(num_products=10, max_goal_options=-1)


def test_the_planner_solves_the_originals_generated_instructions():
    # measured: 0.97 on seeds 0-499 of the default catalogue (5000 products) with the original's goal sizes
    success, _ = play_planner(envs.make("webshop", max_goal_attributes=3, max_goal_options=2), range(60))
    assert success >= 0.93


def play_planner(env: WebShopEnv, seeds, suboptimal_prob=0.0, spaced=False):
    """The planner's episodes; ``spaced``: its text as the tiny policy's word-level tokenizer decodes it
    (``click [ B3 - 417 ]``, ``$ 39 . 99``)."""
    from agentcollapse.models.tokenizer import words

    rng = random.Random(0)
    successes, groundings = [], []
    for seed in seeds:
        env.reset(seed)
        while not env.done:
            think, answer = env.demonstration(rng, suboptimal_prob)
            if spaced:
                think, answer = " ".join(words(think)), " ".join(words(answer))
            g = env.grounding(think)
            if g is not None:
                groundings.append(g)
            _, _, _, info = env.step(answer)
            assert info["action_is_valid"], (seed, answer, info.get("reason"))
        successes.append(env.success)
    return statistics.mean(successes), groundings


def test_the_planner_solves_generated_instructions():
    # the default goals (one attribute, no options); with the original's sizes the misses are items whose
    # options lack the goal's value on every candidate the turn budget lets it open (next test)
    success, groundings = play_planner(envs.make("webshop"), range(150))
    assert success >= 0.93
    assert groundings and min(groundings) == 1.0  # its reasoning names only true facts of the page


def test_the_planner_succeeds_as_a_word_level_tokenizer_writes_it():
    # a policy decodes "click[ B3-417 ]" as "click [ B3 - 417 ]": clicks match without spaces, claims are rejoined
    assert play_planner(envs.make("webshop"), range(40), spaced=True) == play_planner(envs.make("webshop"), range(40))
    success, groundings = play_planner(envs.make("webshop"), range(40), spaced=True)
    assert success >= 0.9 and min(groundings) == 1.0


def test_grounding_catches_false_claims():
    env = envs.make("webshop")
    env.reset(0)
    env.step(env.plan()[0])  # the search
    shown = env._shown()[0]
    cap = f"{env.goal.price_upper:.2f}"
    assert env.grounding(f"{shown.asin} fits at ${shown.price:.2f} , under {cap} .") == 1.0
    assert env.grounding(f"{shown.asin} fits at $999.99 , under {cap} .") == pytest.approx(2 / 3)
    assert env.grounding("B999-1 fits , under 1.00 .") == 0.0  # an id not on the page does not exist; a wrong cap
    assert env.grounding("I should shop carefully .") is None


def test_random_text_never_raises():
    env = envs.make("webshop")
    rng = random.Random(5)
    pieces = ["search[", "click[", "]", "[", "buy now", "next >", "< prev", "||", " ", "B0-1", "\x00", "漢", "$", "shirt"]
    for seed in range(20):
        env.reset(seed)
        while not env.done:
            text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
            _, reward, _, info = env.step(text)
            if info["n_valid_actions"] == 0:
                assert reward == pytest.approx(env.format_penalty) and not info["action_is_valid"]


def test_pages_fit_the_tiny_policy():
    """Warm-start episodes (half random actions, so the longest) fit the tiny model's 2048 positions
    and each response the default 48-token budget, in the word-level tokenizer built from the env's text."""
    from agentcollapse.models.context import encode
    from agentcollapse.models.tiny import demonstration_episodes, episode_sequence
    from agentcollapse.models.tokenizer import UNK, build_tokenizer

    cfg = EnvConfig(name="webshop")
    system, episodes = demonstration_episodes(cfg, 40, suboptimal_prob=0.5, template_prob=0.1, seed=0)
    corpus = (
        [system] + [m["content"] for turns in episodes for messages, r in turns for m in messages] + [r for t in episodes for _, r in t]
    )
    tok = build_tokenizer(corpus)
    assert max(len(episode_sequence(tok, turns)[0]) for turns in episodes) <= 2048 - 48
    assert max(len(encode(tok, r)) for turns in episodes for _, r in turns) <= 48
    # item ids split into words the vocabulary holds (B<thousands> - <number>): held-out pages stay readable
    unseen = WebShopEnv()
    unseen.reset(123_456)
    unseen.step(unseen.plan()[0])
    assert tok.convert_tokens_to_ids(UNK) not in encode(tok, " ".join(p.asin for p in unseen._shown()))


@pytest.mark.slow
def test_one_training_iteration_logs_the_proxy_grounding_and_filter(make_cfg):
    """The whole pipeline on WebShop with a filter (an 8-step warm start writes no valid reasoning yet, so
    the MI proxy and grounding have nothing to score here; a real warm start's run logs them)."""
    from agentcollapse.run import train as run_training

    cfg = make_cfg("env=webshop", "filter=rv_top_p", "trainer.max_steps=1", "trainer.val_every=1", "trainer.val_episodes=2")
    summary = run_training(cfg)
    assert summary["status"] == "finished", summary.get("reason")
    final = summary["final"]
    for key in ("rollout/success_rate", "val/success_rate", "perf/step_time_s", "collapse/valid_thinking_rate", "filter/kept_ratio"):
        assert key in final, key
