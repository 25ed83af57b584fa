"""WebShop's reward against worked examples computed by hand from the original's formula:
r_type * (attributes matched + options matched + price ok) / (goal attributes + goal options + 1)."""

from __future__ import annotations

import pytest

from agentcollapse.envs.webshop.reward import (
    ShopGoal,
    ShopProduct,
    attributes_matched,
    get_reward,
    is_success,
    options_matched,
    reward_parts,
    token_set_ratio,
    type_reward,
)

SHIRT = ShopProduct(
    asin="B1-1",
    title="lumo cotton slim fit shirt",
    category="clothing",
    query="shirt",
    product_category="fashion › clothing › shirt",
    attributes=("cotton", "slim fit", "machine wash"),
    bullet_points=("cotton", "slim fit", "machine wash"),
    description="this shirt from lumo is cotton, slim fit and machine wash .",
    options={"size": ("small", "large"), "color": ("black", "navy")},
    price=23.99,
)
GOAL = ShopGoal(
    asin="B1-1",
    instruction="i need cotton and machine wash shirt , with size : large and color : navy , and price lower than 40.00 dollars",
    name="lumo cotton slim fit shirt",
    query="shirt",
    product_category="fashion › clothing › shirt",
    attributes=("cotton", "machine wash"),
    options=("large", "navy"),
    price_upper=40.0,
)


def test_everything_matched_is_reward_one_and_success():
    # (2 attributes + 2 options + price) / (2 + 2 + 1) = 5 / 5, type 1
    parts = reward_parts(SHIRT, GOAL, SHIRT.price, {"size": "large", "color": "navy"})
    assert (parts.r_type, parts.n_attributes, parts.n_options, parts.price_ok) == (1.0, 2, 2, True)
    assert parts.reward == 1.0 and is_success(parts.reward)


def test_a_wrong_option_costs_one_fifth():
    # (2 + 1 + 1) / 5 = 0.8: "black" is neither a goal option nor in the shirt's text
    assert get_reward(SHIRT, GOAL, SHIRT.price, {"size": "large", "color": "black"}) == pytest.approx(0.8)
    assert not is_success(0.8)


def test_no_options_chosen_and_over_the_cap():
    # (2 + 0 + 0) / 5 = 0.4
    assert get_reward(SHIRT, GOAL, 45.0, {}) == pytest.approx(0.4)


def test_size_is_matched_exactly_other_options_fuzzily():
    # size "larg" is not "large" (exact for size); color "navy blue" token-set-contains "navy" (100 > 85)
    assert options_matched(SHIRT, ["large", "navy"], {"size": "larg", "color": "navy blue"}) == 1
    assert options_matched(SHIRT, ["large", "navy"], {"size": "large", "color": "navy blue"}) == 2


def test_matched_options_are_capped_at_the_goal_options():
    # two purchased options both match one goal option's text fallback; the cap keeps reward <= 1
    product = ShopProduct(
        asin="x", title="navy large shirt", query="shirt", attributes=("cotton",), options={"size": ("large",), "color": ("navy",)}
    )
    goal = ShopGoal("x", "", "navy large shirt", "shirt", "", ("cotton",), ("navy",), 50.0)
    # (1 attribute + min(2, 1) option + price) / (1 + 1 + 1) = 1
    assert get_reward(product, goal, 10.0, {"size": "large", "color": "navy"}) == pytest.approx(1.0)


def test_attribute_found_in_text_when_not_in_the_list():
    product = ShopProduct(asin="x", title="plain shirt", description="a shirt that is wrinkle free", attributes=())
    assert attributes_matched(product, ["wrinkle free", "organic"]) == 1  # whole words in the description
    assert attributes_matched(ShopProduct(asin="y", title="shirts"), ["shirt"]) == 0  # not a substring match


def test_type_reward_levels():
    # same query -> 1; a different product whose name shares no word with the goal's name -> 0
    assert type_reward(SHIRT, GOAL) == 1.0
    lamp = ShopProduct(asin="L", title="vexa soft bedroom lamp", query="lamp", product_category="home and kitchen › home › lamp")
    assert type_reward(lamp, GOAL) == 0.0
    assert get_reward(lamp, GOAL, 10.0, {}) == 0.0
    # no query or category match, title overlap 1 of 5 name words (0.2, not > 0.2) -> 0.5
    other = ShopProduct(asin="O", title="shirt hanger", query="hanger", product_category="home › closet")
    assert type_reward(other, GOAL) == 0.5
    # overlap 1 of 11 words (0.09 < 0.1) -> 0.1
    long_goal = ShopGoal("x", "", "alpha beta gamma delta epsilon zeta eta theta iota kappa shirt", "q", "", ("a",), (), 10.0)
    assert type_reward(other, long_goal) == 0.1


def test_type_reward_scales_the_total():
    # r_type 0.5 x (0 attributes + 0 options + price ok) / (2 + 2 + 1) = 0.1
    other = ShopProduct(asin="O", title="shirt hanger", query="hanger", product_category="home › closet")
    assert get_reward(other, GOAL, 10.0, {}) == pytest.approx(0.1)


def test_token_set_ratio_contains_and_differs():
    assert token_set_ratio("navy blue", "navy") == 100.0
    assert token_set_ratio("slim fit", "fit slim") == 100.0
    assert token_set_ratio("cotton", "wool") < 85
    assert token_set_ratio("", "wool") == 0.0
