"""WebShop (Yao et al. 2022) as a multi-turn text env: find, customise and buy the product an
instruction describes, on a catalogue searched with BM25 (``envs.retrieval``).

Pages, as the original's text mode shows them (``[SEP]`` between the page's texts, the instruction
at the top), each followed by a line naming the actions it takes:

* **search**: ``WebShop [SEP] Instruction: [SEP] <instruction> [SEP] Search``; ``search[query]``.
* **results**: ``... [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] <id>
  [SEP] <title> [SEP] $<price> ...``, ``results_per_page`` items of the best ``max_results`` BM25 hits
  over product text (title, category, attributes, description); ``click[<item id>]``,
  ``click[next >]``, ``click[< prev]`` (after page 1), ``click[back to search]``.
* **item**: ``... [SEP] Back to Search [SEP] < Prev [SEP] <option name> [SEP] <value> ... [SEP]
  <title> [SEP] Price: $<price> [SEP] Buy Now``, with the options clicked so far (the original's
  rich text mode writes "You have clicked ..."); ``click[<option value>]``, ``click[buy now]``,
  ``click[< prev]`` (back to the results), ``click[back to search]``.
* **done**: the score; the episode ends.

One action per turn by default (``max_actions_per_turn``). Search is typed on the search page only,
as on the web page: from elsewhere, ``click[back to search]`` first. An unknown action, a click on
something not on the page, or a search with no searchable words executes nothing, earns the format
penalty, and ``info["reason"]`` says why in one line; the episode goes on. Buying ends the episode
with the original's reward (``reward.py``); success is reward 1. Running out of turns
ends it with reward 0. The description / features / reviews pages are left out: a generated title
names the product's attributes, so the item page already shows what they would.

Defaults are sized for the tiny policy's 2048-token context and 48-token responses: 5 results a page
(the original shows 10) and 8 turns (a planner episode takes 4-7).
"""

from __future__ import annotations

import copy
import random
import re
from typing import Any, ClassVar

from agentcollapse.config.env_kwargs import WebShopKwargs
from agentcollapse.envs import register
from agentcollapse.envs.base import TextEnv
from agentcollapse.envs.webshop.data import Catalogue, goal_for, load_catalogue
from agentcollapse.envs.webshop.reward import RewardParts, ShopGoal, ShopProduct, is_success, reward_parts
from agentcollapse.errors import UserError

SEARCH, RESULTS, ITEM, DONE = "search", "results", "item", "done"
NEXT, PREV, BACK, BUY = "next >", "< prev", "back to search", "buy now"
_ACTION = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)
_PRICE_CLAIM = re.compile(r"\$ ?(\d+(?:\.\d+)?)")
_CAP_CLAIM = re.compile(r"(?:under|lower than|below|cap(?: is)?) \$? ?(\d+(?:\.\d+)?)")
_OFFERED_CLAIM = re.compile(r"([a-z0-9]+(?: [a-z0-9]+)?) is offered")
_MISSING_CLAIM = re.compile(r"[Nn]o ([a-z0-9]+(?: [a-z0-9]+)?) here")
_ID_LIKE = re.compile(r"\b(b[0-9a-z]{1,9}(?:-\d+)?)\b", re.IGNORECASE)


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _key(text: str) -> str:
    """What a click is matched on: lower case, all whitespace removed, so a word-level tokenizer's
    decoded ``click [ B3 - 417 ]`` or ``navy | white`` names the same thing as the page's text."""
    return "".join(text.lower().split())


def _squash(text: str) -> str:
    """Reasoning as a word-level tokenizer decodes it (``$ 39 . 99``, ``B3 - 417``) with numbers and ids rejoined."""
    text = re.sub(r"(?<=\d) ?\. ?(?=\d)", ".", text)
    return re.sub(r"(?<=[A-Za-z0-9]) ?- ?(?=\d)", "-", text)


def _money(value: float) -> str:
    return f"{value:.2f}"


def _has_words(title: str, phrase: str) -> bool:
    words = f" {' '.join(re.findall(r'[a-z0-9]+', title.lower()))} "
    return f" {' '.join(re.findall(r'[a-z0-9]+', phrase.lower()))} " in words


_D = WebShopKwargs()  # the constructor's defaults: their one source (conf/env/webshop.yaml composes the same)


@register("webshop")
class WebShopEnv(TextEnv):
    name = "webshop"
    templates: ClassVar[tuple[str, ...]] = (
        "I should look at the page and choose a good action .",
        "Let me pick the best option for the instruction .",
        "I will shop carefully and buy the right item .",
        "I need to find the product , so I choose a good action .",
    )

    def __init__(
        self,
        num_products: int = _D.num_products,
        catalogue_seed: int = _D.catalogue_seed,
        results_per_page: int = _D.results_per_page,
        max_results: int = _D.max_results,
        max_turns: int = _D.max_turns,
        max_actions_per_turn: int = _D.max_actions_per_turn,
        max_goal_attributes: int = _D.max_goal_attributes,
        max_goal_options: int = _D.max_goal_options,
        data_path: str | None = None,
    ) -> None:
        super().__init__()
        for key, value, least in (
            ("results_per_page", results_per_page, 1),
            ("max_results", max_results, 1),
            ("max_turns", max_turns, 1),
            ("max_goal_attributes", max_goal_attributes, 1),
            ("max_goal_options", max_goal_options, 0),
        ):
            if not isinstance(value, int) or value < least:
                raise UserError(f"env.kwargs.{key}={value!r} must be an integer >= {least}")
        if max_actions_per_turn < 1:
            raise UserError(f"env.kwargs.max_actions_per_turn={max_actions_per_turn} must be >= 1")
        self.max_goal_attributes, self.max_goal_options = max_goal_attributes, max_goal_options
        self.catalogue: Catalogue = load_catalogue(int(num_products), int(catalogue_seed), None if data_path is None else str(data_path))
        self.results_per_page, self.max_results = results_per_page, max_results
        self.max_turns, self.max_actions_per_turn = max_turns, max_actions_per_turn
        self.max_actions = max_turns * max_actions_per_turn
        self.goal: ShopGoal | None = None
        self._clear()

    def __deepcopy__(self, memo: dict[int, Any]) -> WebShopEnv:
        """A copy of the episode's state that shares the catalogue and its index (read-only, and the
        costly part: copying 5000 products and a BM25 index per copy would dwarf a step)."""
        memo[id(self.catalogue)] = self.catalogue
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        for key, value in self.__dict__.items():
            setattr(clone, key, copy.deepcopy(value, memo))
        return clone

    def _clear(self) -> None:
        self.page = SEARCH
        self.query = ""
        self.hits: list[int] = []  # product indices, best first
        self.page_number = 1
        self.item: int | None = None
        self.chosen: dict[str, str] = {}  # option name -> value clicked
        self.visited: list[int] = []  # items opened this episode, in order
        self.last_reward: RewardParts | None = None
        self._reasons: list[str] = []

    # -- contract -------------------------------------------------------------------------
    @property
    def system_prompt(self) -> str:
        return (
            "WebShop : find and buy the product the instruction asks for . Search on the search page , click an item id "
            "to open it , click option values to choose them , then click buy now . "
            "Reply <think> reasoning </think> <answer> one action : search[ query ] or click[ what to click ] </answer> ."
        )

    def _reset(self, seed: int) -> None:
        self._clear()
        self.goal = goal_for(self.catalogue, seed, self.max_goal_attributes, self.max_goal_options)

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        self._reasons = []
        observation, reward, done, info = super().step(action_text)
        if self._reasons:
            info["reason"] = self._reasons[0]
        elif not info["action_is_valid"] and info["n_valid_actions"] == 0:
            info["reason"] = "no action: answer with search[query] or click[...]"
        if self.last_reward is not None and self.terminal:
            info["reward_parts"] = {
                "r_type": self.last_reward.r_type,
                "attributes": self.last_reward.n_attributes,
                "options": self.last_reward.n_options,
                "price_ok": self.last_reward.price_ok,
            }
        return observation, reward, done, info

    def _act(self, words: list[str]) -> tuple[float, int, int]:
        reward, n_valid, n_invalid = 0.0, 0, 0
        for word in words:
            if self.terminal or self.actions_taken >= self.max_actions:
                break
            outcome = self._apply_text(word)
            if isinstance(outcome, str):
                n_invalid += 1
                self._reasons.append(outcome)
                continue
            n_valid += 1
            self.actions_taken += 1
            reward += outcome
        return reward, n_valid, n_invalid

    # -- the site -------------------------------------------------------------------------
    @property
    def product(self) -> ShopProduct | None:
        return None if self.item is None else self.catalogue.products[self.item]

    @property
    def num_pages(self) -> int:
        return max(1, -(-len(self.hits) // self.results_per_page))

    def page_items(self) -> list[int]:
        start = (self.page_number - 1) * self.results_per_page
        return self.hits[start : start + self.results_per_page]

    def clickables(self) -> dict[str, str]:
        """What ``click[...]`` takes on this page: normalised text -> what it is (an action
        keyword, ``item:<index>`` or ``option:<name>``)."""
        out: dict[str, str] = {}
        if self.page == RESULTS:
            out[BACK] = BACK
            if self.page_number < self.num_pages:
                out[NEXT] = NEXT
            if self.page_number > 1:
                out[PREV] = PREV
            for i in self.page_items():
                out[_norm(self.catalogue.products[i].asin)] = f"item:{i}"
        elif self.page == ITEM and self.product is not None:
            out[BACK] = BACK
            out[PREV] = PREV
            for name, values in self.product.options.items():
                for value in values:
                    out.setdefault(_norm(value), f"option:{name}")
            out[BUY] = BUY
        return out

    def _apply_text(self, text: str) -> float | str:
        """Do one action; its reward, or why it is not an action here (a one-line reason)."""
        match = _ACTION.match(text)
        if match is None:
            return f"not an action: {text[:40]!r}; use search[query] or click[...]"
        kind, arg = match.group(1).lower(), match.group(2)
        if kind == "search":
            if self.page != SEARCH:
                return "search is on the search page only: click[back to search] first"
            if self.catalogue.index is None:  # built in Catalogue.__post_init__
                raise RuntimeError("webshop catalogue has no index")
            try:
                hits = self.catalogue.index.search(arg, self.max_results)
            except ValueError as exc:
                return f"empty search: {exc}"
            self.query, self.hits, self.page_number, self.page = _norm(arg), [i for i, _ in hits], 1, RESULTS
            return 0.0
        wanted = _key(arg)
        text, target = next(((t, v) for t, v in self.clickables().items() if _key(t) == wanted), ("", None))
        if target is None:
            return f"click[{_norm(arg)[:40]}] is not on this {self.page} page"
        if target == BACK:
            self.page, self.item, self.chosen = SEARCH, None, {}
        elif target == NEXT:
            self.page_number += 1
        elif target == PREV and self.page == RESULTS:
            self.page_number -= 1
        elif target == PREV:  # item page -> the results it was opened from
            self.page, self.item, self.chosen = RESULTS, None, {}
        elif target.startswith("item:"):
            self.item, self.chosen, self.page = int(target[5:]), {}, ITEM
            self.visited.append(self.item)
        elif target.startswith("option:"):
            self.chosen[target[7:]] = text
        elif target == BUY:
            return self._buy()
        return 0.0

    def _buy(self) -> float:
        assert self.product is not None and self.goal is not None
        self.last_reward = reward_parts(self.product, self.goal, self.product.price, self.chosen)
        self.page, self.terminal = DONE, True
        self.success = is_success(self.last_reward.reward)
        return float(self.last_reward.reward)

    # -- text -----------------------------------------------------------------------------
    def render_grid(self) -> str:
        """The page as the original's text mode shows it."""
        assert self.goal is not None, "call reset(seed) first"
        head = f"Instruction: [SEP] {self.goal.instruction}"
        if self.page == SEARCH:
            return f"WebShop [SEP] {head} [SEP] Search"
        if self.page == RESULTS:
            parts = [head, "Back to Search", f"Page {self.page_number} (Total results: {len(self.hits)})"]
            if self.page_number > 1:
                parts.append("< Prev")
            if self.page_number < self.num_pages:
                parts.append("Next >")
            for i in self.page_items():
                p = self.catalogue.products[i]
                parts += [p.asin, p.title, f"${_money(p.price)}"]
            return " [SEP] ".join(parts)
        if self.page == ITEM and self.product is not None:
            p = self.product
            parts = [head, "Back to Search", "< Prev"]
            for name, values in p.options.items():
                parts += [name, *values]
            parts += [p.title, f"Price: ${_money(p.price)}", "Buy Now"]
            page = " [SEP] ".join(parts)
            if self.chosen:
                page = f"You have clicked {' and '.join(self.chosen.values())}.\n{page}"
            return page
        score = self.last_reward.reward if self.last_reward is not None else 0.0
        return f"Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] {score:.2f}"

    def observation(self) -> str:
        actions = {
            SEARCH: "search[ query ]",
            RESULTS: "click[ item id ] , click[ next > ] , click[ < prev ] , click[ back to search ]",
            ITEM: "click[ option ] , click[ buy now ] , click[ < prev ] , click[ back to search ]",
            DONE: "none",
        }[self.page]
        return f"{self.render_grid()}\nActions: {actions}"

    def vocabulary_texts(self) -> list[str]:
        """Every product's id, title, price and option values, and (real data) every instruction: a
        held-out episode may show any of them."""
        out = [
            " ".join((p.asin, p.title, f"${_money(p.price)}", *(v for vs in p.options.values() for v in vs)))
            for p in self.catalogue.products
        ]
        return out + [g.instruction for g in self.catalogue.goals]

    # -- grounding ------------------------------------------------------------------------
    def _shown(self) -> list[ShopProduct]:
        if self.page == RESULTS:
            return [self.catalogue.products[i] for i in self.page_items()]
        if self.page == ITEM and self.product is not None:
            return [self.product]
        return []

    def grounding(self, think: str) -> float | None:
        """Share of true claims about the page: every item id named is on it, every ``$price``
        named is a price shown on it, a cap (``under N``, ``lower than N``) is the instruction's, and
        on an item page ``<value> is offered`` / ``no <value> here`` are true of its options."""
        if self.goal is None:
            return None
        think = _squash(think)
        shown = self._shown()
        ids = {_norm(p.asin) for p in shown}
        prices = {_money(p.price) for p in shown}
        claims: list[bool] = []
        for word in _ID_LIKE.findall(think):
            if _norm(word) in self.catalogue.by_id:
                claims.append(_norm(word) in ids)
        cap_spans = [m.span(1) for m in _CAP_CLAIM.finditer(think)]
        for m in _PRICE_CLAIM.finditer(think):
            if not any(start <= m.start(1) < end for start, end in cap_spans):
                claims.append(_money(float(m.group(1))) in prices)
        for m in _CAP_CLAIM.finditer(think):
            claims.append(abs(float(m.group(1)) - self.goal.price_upper) < 1e-6)
        if self.page == ITEM and self.product is not None:
            offered = [_key(v) for values in self.product.options.values() for v in values]

            def is_offered(said: str) -> bool:  # a two-word capture may hold a word before the value ("size 12")
                whole, last = _key(said), _key(said.split()[-1])
                return any(v in (whole, last) or v.endswith(whole) for v in offered)

            claims += [is_offered(v) for v in _OFFERED_CLAIM.findall(think)]
            claims += [not is_offered(v) for v in _MISSING_CLAIM.findall(think)]
        return sum(claims) / len(claims) if claims else None

    # -- planner --------------------------------------------------------------------------
    def goal_words(self) -> list[str]:
        """What the planner searches for: the goal's attributes and its product type."""
        assert self.goal is not None
        return [*self.goal.attributes, self.goal.query]

    def item_score(self, product: ShopProduct) -> tuple[int, bool]:
        """(goal phrases its title names, price within the cap): how the planner ranks a result."""
        assert self.goal is not None
        named = sum(_has_words(product.title, phrase) for phrase in self.goal_words() if phrase)
        return named, product.price <= self.goal.price_upper

    def plan(self) -> tuple[str, str]:
        """The planner's next action and the facts of the page it rests on (reasoning)."""
        assert self.goal is not None
        goal, cap = self.goal, _money(self.goal.price_upper)
        if self.page == SEARCH:
            query = " ".join(w for w in self.goal_words() if w)
            return f"search[ {query} ]", f"I need {query} under {cap} ."
        if self.page == RESULTS:
            items = self.page_items()
            fresh = [i for i in items if i not in self.visited]
            full = len([w for w in self.goal_words() if w])
            ranked = sorted(fresh, key=lambda i: self.item_score(self.catalogue.products[i]), reverse=True)
            if ranked:
                best = self.catalogue.products[ranked[0]]
                named, cheap = self.item_score(best)
                if (named == full and cheap) or self.page_number >= self.num_pages or self.page_number >= 3:
                    return f"click[ {best.asin} ]", f"{best.asin} fits at ${_money(best.price)} , under {cap} ."
            if self.page_number < self.num_pages:
                return f"click[ {NEXT} ]", "No item here fits , next page ."
            return f"click[ {BACK} ]", "Nothing fits , I search again ."
        if self.page == ITEM and self.product is not None:
            p = self.product
            offered = {_norm(v): name for name, values in p.options.items() for v in values}
            turns_left = self.max_turns - self.turn
            missing = [v for v in goal.options if _norm(v) not in offered]
            if missing and turns_left >= len(goal.options) + 3:  # back, open another, its options, buy
                return f"click[ {PREV} ]", f"No {missing[0]} here , I go back ."
            for value in goal.options:
                name = offered.get(_norm(value))
                if name is not None and self.chosen.get(name) != _norm(value) and turns_left > 1:
                    return f"click[ {_norm(value)} ]", f"{value} is offered , I pick it ."
            return f"click[ {BUY} ]", f"{p.asin} costs ${_money(p.price)} , under {cap} . I buy it ."
        return "click[ buy now ]", "The episode is over ."

    def demonstration(self, rng: random.Random, suboptimal_prob: float = 0.0) -> tuple[str, str]:
        """The planner's action with reasoning naming the page's facts (the cap, the id and price of
        the item it opens or buys, the option it picks); with ``suboptimal_prob`` a random action of
        the page instead, with reasoning that still states a fact of the page truthfully."""
        answer, think = self.plan()
        if rng.random() < suboptimal_prob and self.page in (RESULTS, ITEM):
            choices = [c for c in self.clickables() if c != BUY or self.page == ITEM]
            pick = rng.choice(choices)
            answer = f"click[ {pick} ]"
            shown = self._shown()
            fact = f"{shown[0].asin} costs ${_money(shown[0].price)} ." if shown else ""
            think = f"{fact} I try {pick} .".strip()
        return think, answer
