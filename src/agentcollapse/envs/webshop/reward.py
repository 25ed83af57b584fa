"""WebShop's reward (Yao et al. 2022, ``web_agent_site/engine/goal.py`` ``get_reward``), written once.

For a purchase of ``product`` with the chosen ``options`` at ``price`` against a goal::

    reward = r_type * (n_attributes_matched + n_options_matched + price_ok)
                    / (n_goal_attributes + n_goal_options + 1)

and success is reward 1 (every goal attribute and option matched, the price within the cap and the
right type of product). The parts follow the original:

* **r_type** (``type_reward``) is 1 when the purchase has the goal's search query, or shares at least
  two levels of its category path, or more than 20% of the goal name's words; 0.5 when none of these
  but some name overlap; 0.1 under 10% overlap; 0 with no overlap at all.
  *Simplified*: the original keeps only the nouns of both names (spaCy's ``en_core_web_lg`` part-of-
  speech tags); we keep every word that is not a stop word or a number. spaCy's large model is a
  download, and nothing here downloads at run time; on generated products the name is brand +
  attributes + a product noun, so the overlap it measures is the same kind of evidence.
* **attributes**: a goal attribute matches when a product attribute is a fuzzy match (token-set
  ratio above 85, as the original's ``thefuzz.fuzz.token_set_ratio``) or the attribute's text
  appears in the title, bullet points or description.
* **options**: each purchased option value counts once when it is among the goal's option values
  (exactly, for ``size``; fuzzy for the others) or appears in the title, bullet points or
  description. *Simplified*: the original first maps colour spellings to a canonical colour
  (``normalize_color``, a hand list of Amazon colour names); generated options use plain colour
  words, so we compare them as written (lower-cased).
* **price**: 1 when ``price <= price_upper``.

Two more departures, both to keep the reward at most 1 and the text checks meaningful: the text
fallbacks match whole words (the original tests substrings, so a size ``s`` "appeared" in any title
with an s in it), and matched options are capped at the number of goal options (the original counts
every purchased option that matches, so extra matching options could push the reward past 1).

``token_set_ratio`` is thefuzz's definition (sorted intersection and differences of the two token
sets, the best of three pairwise similarities, 0-100) computed with ``difflib``'s similarity
instead of the Levenshtein ratio: thefuzz is not a dependency here; the two agree at the threshold
on everything a subset-of-words match decides (a token set contained in the other scores 100 in both).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher

EXACT_MATCH_OPTIONS = ("size",)
FUZZY_THRESHOLD = 85
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
STOP_WORDS = frozenset(
    "a an and are as at be by for from in into is it of on or pack the to with without you your i me my need "
    "looking want am this that".split()
)


@dataclass(frozen=True)
class ShopProduct:
    """What the reward reads of a product (the original's ``Title``, ``Attributes``, ``BulletPoints``,
    ``Description``, ``query``, ``product_category``); ``options`` maps an option name to its values."""

    asin: str
    title: str
    category: str = ""
    query: str = ""
    product_category: str = ""
    attributes: tuple[str, ...] = ()
    bullet_points: tuple[str, ...] = ()
    description: str = ""
    options: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    price: float = 100.0


@dataclass(frozen=True)
class ShopGoal:
    """An instruction: the text the agent reads and what the reward checks."""

    asin: str  # the product the instruction was written for
    instruction: str
    name: str  # the target product's name, for the type match
    query: str
    product_category: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]  # option values (the original's ``goal_options`` values)
    price_upper: float


@dataclass(frozen=True)
class RewardParts:
    reward: float
    r_type: float
    n_attributes: int  # goal attributes matched
    n_options: int  # purchased options matched
    price_ok: bool


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def similarity(a: str, b: str) -> float:
    """0-100 similarity of two strings (difflib's ratio standing in for thefuzz's ``ratio``)."""
    if not a and not b:
        return 100.0
    return 100.0 * SequenceMatcher(None, a, b, autojunk=False).ratio()


def token_set_ratio(a: str, b: str) -> float:
    """thefuzz's ``token_set_ratio``: 100 when one token set contains the other, else the best
    similarity among (intersection, intersection + rest of a, intersection + rest of b)."""
    ta, tb = set(_tokens(a)), set(_tokens(b))
    if not ta or not tb:
        return 0.0
    common = " ".join(sorted(ta & tb))
    rest_a = " ".join(sorted(ta - tb))
    rest_b = " ".join(sorted(tb - ta))
    with_a = f"{common} {rest_a}".strip()
    with_b = f"{common} {rest_b}".strip()
    scores = [similarity(with_a, with_b)]
    if common:
        scores += [similarity(common, with_a), similarity(common, with_b)]
    return max(scores)


def _name_words(text: str) -> set[str]:
    return {w for w in _tokens(text) if w not in STOP_WORDS and not w.isdigit()}


def type_reward(product: ShopProduct, goal: ShopGoal) -> float:
    """r_type: does the purchase have the type of product the goal asks for (see the module doc)."""
    query_match = bool(goal.query) and product.query == goal.query
    bought_path = {x.strip() for x in product.product_category.split("›") if x.strip()}
    goal_path = {x.strip() for x in goal.product_category.split("›") if x.strip()}
    category_match = len(bought_path & goal_path) >= 2
    desired = _name_words(goal.name)
    title_score = len(_name_words(product.title) & desired) / len(desired) if desired else 0.2
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type


def _in_text(value: str, product: ShopProduct) -> bool:
    """``value`` appears in the title, bullet points or description, as whole words."""
    words = " ".join(_tokens(value))
    if not words:
        return False
    text = " ".join(_tokens(" ".join((product.title, *product.bullet_points, product.description))))
    return f" {words} " in f" {text} "


def attributes_matched(product: ShopProduct, goal_attributes: Sequence[str]) -> int:
    """Goal attributes the product has (fuzzy on its attribute list, else in its text)."""
    count = 0
    for wanted in goal_attributes:
        if any(token_set_ratio(have, wanted) > FUZZY_THRESHOLD for have in product.attributes) or _in_text(wanted, product):
            count += 1
    return count


def options_matched(product: ShopProduct, goal_options: Sequence[str], chosen: Mapping[str, str]) -> int:
    """Purchased option values that match a goal option (exact for size, fuzzy otherwise) or appear
    in the product's text; each purchased option counts at most once."""
    wanted = [o.lower() for o in goal_options]
    count = 0
    for name, value in chosen.items():
        value = value.lower()
        if name.lower() in EXACT_MATCH_OPTIONS:
            matched = value in wanted
        else:
            matched = any(token_set_ratio(w, value) > FUZZY_THRESHOLD for w in wanted)
        if matched or _in_text(value, product):
            count += 1
    return count


def reward_parts(product: ShopProduct, goal: ShopGoal, price: float, chosen: Mapping[str, str]) -> RewardParts:
    """The original's ``get_reward`` with its parts (see the module doc)."""
    r_type = type_reward(product, goal)
    n_att = attributes_matched(product, goal.attributes)
    n_opt = min(options_matched(product, goal.options, chosen), len(goal.options))
    price_ok = price <= goal.price_upper
    total = (n_att + n_opt + int(price_ok)) / (len(goal.attributes) + len(goal.options) + 1)
    return RewardParts(reward=total * r_type, r_type=r_type, n_attributes=n_att, n_options=n_opt, price_ok=price_ok)


def get_reward(product: ShopProduct, goal: ShopGoal, price: float, chosen: Mapping[str, str]) -> float:
    return reward_parts(product, goal, price, chosen).reward


def is_success(reward: float) -> bool:
    """Success = reward 1 (up to float rounding)."""
    return reward >= 1.0 - 1e-9
