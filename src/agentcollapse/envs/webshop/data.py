"""WebShop's data: a generated catalogue with instructions drawn from it, or the real files.

**Generated** (the default, nothing downloaded): ``generate_catalogue(num_products, seed)`` draws
products from eight categories (clothing, shoes, beauty, grocery, electronics, home, office, pet
supplies), each with its product nouns, attribute pool, option dimensions (size, color, scent,
flavor, pack ...) and price range. A product has an id in the ASIN's place (``B<thousands>-<rest>``,
e.g. ``B3-417``, so a word-level tokenizer keeps it in a few known tokens), a title (brand +
its 2-3 attributes + noun), a category path, bullet points and a one-line description, half or more of the
values of each of its category's option dimensions, and a price. ``generated_goal(catalogue, seed)`` draws a
product and writes an instruction for it as the original's synthetic goals do: 1-3 of its attributes,
one value of each of 1-2 of its option dimensions (fewer of each with ``env.kwargs.max_goal_attributes`` and
``max_goal_options``, a difficulty knob), and a price cap above its price (two of the first
four multiples of 10 above the price, the larger kept), e.g. ``i need cotton and slim fit shirt , with
size : large , and price lower than 40.00 dollars``. The same seed gives the same
catalogue and instruction on every machine.

**Real** (``env.data_path``, a directory holding the files of princeton-nlp/WebShop's ``data/``):

* ``items_shuffle_1000.json`` (or ``items_shuffle.json``): a JSON list of products, each an object with
  ``asin`` (text), ``name`` (the title), and optionally ``full_description`` (text),
  ``small_description`` (text or list of texts: the bullet points), ``pricing`` (text such as
  ``"$12.99"`` or ``"$10.00 - $20.00"``; missing or empty means $100, as in the original),
  ``customization_options`` (``{option name: [{"value": text, ...}, ...] or null}``), ``category``,
  ``query`` and ``product_category`` (``"a › b › c"``).
* ``items_human_ins.json``: ``{asin: [{"instruction": text, "instruction_attributes": [text, ...],
  "instruction_options": [text, ...]}, ...]}``, the crowd-sourced instructions. As in the original, an
  instruction with no attributes is skipped and ", and price lower than N dollars" is appended with
  N drawn from the first four multiples of 10 above the product's price (seeded by asin, so fixed).
* optional ``items_ins_v2_1000.json`` (or ``items_ins_v2.json``): ``{asin: {"attributes": [text, ...]}}``,
  the products' attribute lists; without it a product has none (the reward then finds attributes in
  its text only).

As in the original's loader, products whose asin is ``"nan"`` or longer than 10 characters and
repeated asins are skipped, option values are lower-cased with ``/`` written `` | ``, and a product's
price is its first (lowest) listed price (the original draws one uniformly from a listed range
each time it starts). A file that is not what this describes is one line naming the file, the
product or instruction, and what is wrong.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentcollapse.envs.retrieval import BM25Index
from agentcollapse.envs.splits import is_held_out_seed, split_by_hash
from agentcollapse.envs.webshop.reward import ShopGoal, ShopProduct
from agentcollapse.errors import UserError

PRICE_RANGE = [10.0 * i for i in range(1, 100)]  # the original's price caps
PRODUCT_FILES = ("items_shuffle_1000.json", "items_shuffle.json")
INSTRUCTION_FILE = "items_human_ins.json"
ATTRIBUTE_FILES = ("items_ins_v2_1000.json", "items_ins_v2.json")


@dataclass(frozen=True)
class Category:
    name: str
    department: str
    nouns: tuple[str, ...]
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]]
    price: tuple[int, int]


_COLORS = ("black", "white", "navy", "grey", "red", "green", "beige", "pink")
CATEGORIES: tuple[Category, ...] = (
    Category(
        "clothing",
        "fashion",
        ("shirt", "hoodie", "sweater", "jacket", "dress", "blouse", "pants"),
        ("cotton", "machine wash", "long sleeve", "short sleeve", "slim fit", "relaxed fit", "polyester", "wool", "button down", "hooded"),
        {"size": ("small", "medium", "large", "xlarge"), "color": _COLORS},
        (12, 80),
    ),
    Category(
        "shoes",
        "fashion",
        ("sneakers", "boots", "sandals", "loafers", "slippers"),
        ("rubber sole", "leather", "memory foam", "non slip", "waterproof", "lightweight", "lace up", "slip on"),
        {"size": ("6", "7", "8", "9", "10", "11", "12"), "color": _COLORS},
        (20, 120),
    ),
    Category(
        "beauty",
        "beauty and personal care",
        ("shampoo", "conditioner", "lotion", "serum", "lipstick", "perfume", "soap"),
        (
            "paraben free",
            "cruelty free",
            "natural ingredients",
            "long lasting",
            "sensitive skin",
            "travel size",
            "fragrance free",
            "organic",
        ),
        {"scent": ("lavender", "vanilla", "rose", "unscented", "citrus", "coconut"), "size": ("2 ounce", "8 ounce", "16 ounce")},
        (5, 60),
    ),
    Category(
        "grocery",
        "grocery and gourmet food",
        ("coffee", "tea", "snack bars", "granola", "chocolate", "almonds", "crackers"),
        ("gluten free", "sugar free", "non gmo", "keto friendly", "low calorie", "high protein", "vegan", "caffeine free"),
        {"flavor": ("original", "mint", "caramel", "honey", "dark roast", "berry"), "pack": ("1 pack", "6 pack", "12 pack")},
        (4, 45),
    ),
    Category(
        "electronics",
        "electronics",
        ("headphones", "charger", "speaker", "keyboard", "mouse", "webcam", "earbuds"),
        ("wireless", "bluetooth", "usb c", "noise cancelling", "fast charging", "high definition", "portable", "rechargeable"),
        {"color": _COLORS},
        (15, 150),
    ),
    Category(
        "home",
        "home and kitchen",
        ("pillow", "blanket", "curtains", "lamp", "rug", "towels", "sheets"),
        ("easy clean", "machine washable", "blackout", "soft", "living room", "bedroom", "microfiber", "eco friendly"),
        {"color": _COLORS, "size": ("twin", "full", "queen", "king")},
        (10, 120),
    ),
    Category(
        "office",
        "office products",
        ("notebook", "pens", "desk organizer", "stapler", "backpack", "planner"),
        ("durable", "refillable", "water resistant", "compact", "heavy duty", "recycled", "ergonomic", "spiral bound"),
        {"color": _COLORS, "pack": ("1 pack", "3 pack", "10 pack")},
        (3, 50),
    ),
    Category(
        "pet supplies",
        "pet supplies",
        ("dog bed", "cat toy", "leash", "pet shampoo", "litter box", "dog treats"),
        ("washable", "chew resistant", "non toxic", "adjustable", "small breed", "large breed", "odor control", "grain free"),
        {"size": ("small", "medium", "large"), "color": _COLORS},
        (6, 70),
    ),
)
_BRAND_HEADS = ("lu", "ve", "ka", "mo", "ri", "za", "no", "te", "fi", "ba", "so", "da")
_BRAND_TAILS = ("mo", "xa", "rin", "vo", "lix", "ta", "nex", "ra")
BRANDS = tuple(h + t for h in _BRAND_HEADS for t in _BRAND_TAILS)


def product_id(index: int) -> str:
    """A generated product's id (the ASIN's place): ``B<index // 1000>-<index % 1000>``."""
    return f"B{index // 1000}-{index % 1000}"


@dataclass
class Catalogue:
    """Products, their BM25 index over title, category, attributes and description, and (real data)
    the instruction list; generated catalogues draw an instruction per seed instead."""

    products: list[ShopProduct]
    goals: list[ShopGoal] = field(default_factory=list)
    source: str = "generated"
    index: BM25Index | None = None
    by_id: dict[str, int] = field(default_factory=dict)

    train_goals: list[ShopGoal] = field(default_factory=list)  # real data: what training episodes ask
    heldout_goals: list[ShopGoal] = field(default_factory=list)  # real data: what evaluation episodes ask

    def __post_init__(self) -> None:
        self.by_id = {p.asin.lower(): i for i, p in enumerate(self.products)}
        self.index = BM25Index([product_text(p) for p in self.products])
        self.train_goals, self.heldout_goals = split_by_hash(self.goals, lambda g: g.instruction)


def product_text(product: ShopProduct) -> str:
    """What the search engine indexes: title, category, attributes and description."""
    return " ".join((product.title, product.category, product.product_category, " ".join(product.attributes), product.description))


# -- generated ------------------------------------------------------------------------------
def generate_product(index: int, rng: random.Random) -> ShopProduct:
    cat = CATEGORIES[rng.randrange(len(CATEGORIES))]
    noun = rng.choice(cat.nouns)
    brand = rng.choice(BRANDS)
    attributes = tuple(rng.sample(cat.attributes, rng.randint(2, 3)))
    options = {}
    for name, values in cat.options.items():
        kept = set(rng.sample(values, rng.randint((len(values) + 1) // 2, len(values))))  # half of them or more
        options[name] = tuple(v for v in values if v in kept)  # in the category's order
    low, high = cat.price
    price = round(rng.uniform(low, high)) - 0.01
    price = max(price, 0.99)
    return ShopProduct(
        asin=product_id(index),
        title=f"{brand} {' '.join(attributes)} {noun}",
        category=cat.name,
        query=noun,
        product_category=f"{cat.department} › {cat.name} › {noun}",
        attributes=attributes,
        bullet_points=attributes,
        description=f"this {noun} from {brand} is {', '.join(attributes[:-1])} and {attributes[-1]} .",
        options=options,
        price=price,
    )


def generate_catalogue(num_products: int, seed: int = 0) -> list[ShopProduct]:
    rng = random.Random(f"webshop-catalogue-{seed}")
    return [generate_product(i, rng) for i in range(num_products)]


def price_cap(price: float, rng: random.Random) -> float:
    """The original's cap: two of the first four multiples of 10 above the price, the larger one
    (no cap, 1e6, when fewer than two are left)."""
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) < 2:
        return 1_000_000.0
    return max(rng.sample(above, 2))


def _price_text(cap: float) -> str:
    return f", and price lower than {cap:.2f} dollars" if cap < 1_000_000 else ""


MAX_GOAL_ATTRIBUTES, MAX_GOAL_OPTIONS = 3, 2  # the original's synthetic goals: 1-3 attributes, 1-2 options


def generated_goal(
    products: Sequence[ShopProduct], seed: int, max_attributes: int = MAX_GOAL_ATTRIBUTES, max_options: int = MAX_GOAL_OPTIONS
) -> ShopGoal:
    """An instruction for a product drawn by ``seed`` (see the module doc), asking for 1 to ``max_attributes``
    of its attributes and 1 to ``max_options`` of its option dimensions (0: none). At the defaults the draws
    are the original's, so the same seed gives the same instruction as before the knobs existed."""
    rng = random.Random(f"webshop-goal-{seed}")
    product = products[rng.randrange(len(products))]
    attributes = tuple(rng.sample(product.attributes, rng.randint(1, min(max_attributes, len(product.attributes)))))
    names = sorted(product.options)
    n_options = min(max_options, len(names))
    chosen = sorted(rng.sample(names, rng.randint(1, n_options))) if n_options > 0 else []
    goal_options = {name: rng.choice(product.options[name]) for name in chosen}
    cap = price_cap(product.price, rng)
    text = f"i need {' and '.join(attributes)} {product.query}"
    if goal_options:
        text += " , with " + " and ".join(f"{k} : {v}" for k, v in goal_options.items())
    text += _price_text(cap).replace(",", " ,", 1)
    return ShopGoal(
        asin=product.asin,
        instruction=text,
        name=product.title,
        query=product.query,
        product_category=product.product_category,
        attributes=attributes,
        options=tuple(goal_options.values()),
        price_upper=cap,
    )


# -- real files -----------------------------------------------------------------------------
def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: line {exc.lineno} column {exc.colno}: not valid JSON ({exc.msg})") from None


def _text(value: Any, where: str, key: str, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        got = "nothing" if value is None else type(value).__name__
        raise UserError(f"{where}: {key!r} must be text, got {got}")
    return value


def _texts(value: Any, where: str, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(f"{where}: {key!r} must be a list of texts")
    return tuple(value)


def parse_pricing(value: Any, where: str) -> float:
    """The first price in a pricing text (``"$12.99"``, ``"$10.00 - $20.00"``); $100 when empty."""
    if value is None or value == "" or value == []:
        return 100.0
    if not isinstance(value, str):
        raise UserError(f"{where}: 'pricing' must be text such as \"$12.99\", got {type(value).__name__}")
    prices = [re.sub(r"[^\d.]", "", part) for part in value.split("$")[1:]]
    try:
        return float(prices[0])
    except (IndexError, ValueError):
        raise UserError(f"{where}: 'pricing' {value[:40]!r} has no price such as \"$12.99\"") from None


def _product(raw: Any, where: str, attributes: dict[str, Any]) -> ShopProduct:
    if not isinstance(raw, dict):
        raise UserError(f"{where}: a product must be a JSON object, got {type(raw).__name__}")
    asin = _text(raw.get("asin"), where, "asin", required=True)
    name = _text(raw.get("name"), where, "name", required=True)
    options: dict[str, tuple[str, ...]] = {}
    custom = raw.get("customization_options") or {}
    if not isinstance(custom, dict):
        raise UserError(f"{where}: 'customization_options' must be an object of option name -> list of {{\"value\": ...}}")
    for opt_name, contents in custom.items():
        if contents is None:
            continue
        if not isinstance(contents, list) or not all(isinstance(c, dict) and isinstance(c.get("value"), str) for c in contents):
            raise UserError(f"{where}: option {opt_name!r} must be a list of objects with a text 'value'")
        options[opt_name.lower()] = tuple(c["value"].strip().replace("/", " | ").lower() for c in contents)
    attrs = attributes.get(asin, {})
    attr_list = _texts(attrs.get("attributes") if isinstance(attrs, dict) else None, f"attributes of {asin}", "attributes")
    return ShopProduct(
        asin=asin,
        title=name,
        category=_text(raw.get("category"), where, "category"),
        query=_text(raw.get("query"), where, "query").lower().strip(),
        product_category=_text(raw.get("product_category"), where, "product_category"),
        attributes=attr_list,
        bullet_points=_texts(raw.get("small_description"), where, "small_description"),
        description=_text(raw.get("full_description"), where, "full_description"),
        options=options,
        price=parse_pricing(raw.get("pricing"), where),
    )


def _first_existing(root: Path, names: Sequence[str]) -> Path | None:
    return next((root / n for n in names if (root / n).is_file()), None)


def load_real(data_path: str | Path) -> tuple[list[ShopProduct], list[ShopGoal]]:
    """Products and instructions from a directory of the original's files (see the module doc)."""
    root = Path(data_path).expanduser()
    if not root.exists():
        raise UserError(
            f"env.data_path {root} does not exist; point it at a directory holding WebShop's {PRODUCT_FILES[0]} and {INSTRUCTION_FILE}"
        )
    if not root.is_dir():
        raise UserError(f"env.data_path {root} is a file; point it at the directory holding {PRODUCT_FILES[0]} and {INSTRUCTION_FILE}")
    product_file = _first_existing(root, PRODUCT_FILES)
    if product_file is None:
        raise UserError(f"env.data_path {root} has no {' or '.join(PRODUCT_FILES)} (WebShop's product file)")
    if not (root / INSTRUCTION_FILE).is_file():
        raise UserError(f"env.data_path {root} has no {INSTRUCTION_FILE} (WebShop's human instructions)")
    attribute_file = _first_existing(root, ATTRIBUTE_FILES)
    attributes = _read_json(attribute_file) if attribute_file else {}
    if not isinstance(attributes, dict):
        raise UserError(f'{attribute_file}: must be a JSON object of asin -> {{"attributes": [...]}}')
    raw_products = _read_json(product_file)
    if not isinstance(raw_products, list):
        raise UserError(f"{product_file}: must be a JSON list of products, got {type(raw_products).__name__}")
    products: list[ShopProduct] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_products):
        where = f"{product_file.name}: product {i}" + (
            f" (asin {raw.get('asin')})" if isinstance(raw, dict) and isinstance(raw.get("asin"), str) else ""
        )
        product = _product(raw, where, attributes)
        if product.asin == "nan" or len(product.asin) > 10 or product.asin in seen:
            continue
        seen.add(product.asin)
        products.append(product)
    if not products:
        raise UserError(f"{product_file}: no products (an empty list, or every asin skipped)")
    instructions = _read_json(root / INSTRUCTION_FILE)
    if not isinstance(instructions, dict):
        raise UserError(f"{INSTRUCTION_FILE}: must be a JSON object of asin -> list of instructions")
    by_asin = {p.asin: p for p in products}
    goals: list[ShopGoal] = []
    for asin, entries in instructions.items():
        if asin not in by_asin:
            continue
        if not isinstance(entries, list):
            raise UserError(f"{INSTRUCTION_FILE}: asin {asin}: must be a list of instructions")
        product = by_asin[asin]
        for k, entry in enumerate(entries):
            where = f"{INSTRUCTION_FILE}: asin {asin} instruction {k}"
            if not isinstance(entry, dict):
                raise UserError(f"{where}: must be an object with 'instruction', 'instruction_attributes', 'instruction_options'")
            text = _text(entry.get("instruction"), where, "instruction", required=True)
            goal_attributes = _texts(entry.get("instruction_attributes"), where, "instruction_attributes")
            goal_options = entry.get("instruction_options") or []
            if isinstance(goal_options, dict):
                goal_options = list(goal_options.values())
            goal_options = _texts(goal_options, where, "instruction_options")
            if not goal_attributes:
                continue  # as the original: an instruction without attributes is skipped
            cap = price_cap(product.price, random.Random(f"{asin}-{k}"))
            goals.append(
                ShopGoal(
                    asin=asin,
                    instruction=text.strip().strip(".") + _price_text(cap),
                    name=product.title,
                    query=product.query,
                    product_category=product.product_category,
                    attributes=goal_attributes,
                    options=tuple(o.lower() for o in goal_options),
                    price_upper=cap,
                )
            )
    if not goals:
        raise UserError(
            f"{INSTRUCTION_FILE}: no usable instruction (none names a product of {product_file.name} with instruction_attributes)"
        )
    return products, goals


@lru_cache(maxsize=4)
def load_catalogue(num_products: int, seed: int, data_path: str | None) -> Catalogue:
    """The catalogue (and its search index) an env plays on, built once per process and shared by
    every env instance with the same settings (a rollout makes one env per trajectory)."""
    if data_path is not None:
        products, goals = load_real(data_path)
        return Catalogue(products, goals, source=str(data_path))
    if num_products < 1:
        raise UserError(f"env.kwargs.num_products={num_products} must be >= 1 (e.g. 5000)")
    return Catalogue(generate_catalogue(num_products, seed))


def goal_for(catalogue: Catalogue, seed: int, max_attributes: int = MAX_GOAL_ATTRIBUTES, max_options: int = MAX_GOAL_OPTIONS) -> ShopGoal:
    """The instruction of an episode: drawn from the generated catalogue (at most ``max_attributes``
    attributes and ``max_options`` options), or (real data, whose instructions are as written) the
    ``seed % len``-th human instruction of the held-out ones (an evaluation seed) or of the others
    (``envs.splits``: the tenth whose instructions hash lowest is held out)."""
    if catalogue.goals:
        pool = catalogue.heldout_goals if is_held_out_seed(seed) else catalogue.train_goals
        return pool[seed % len(pool)]
    return generated_goal(catalogue.products, seed, max_attributes, max_options)
