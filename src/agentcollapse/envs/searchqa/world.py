"""SearchQA's generated world: invented countries, cities, organisations and people, their relations
rendered as one short passage each, and questions about them drawn per seed.

Every name is made of invented syllables and every fact is drawn from ``world_seed``, so no
pretrained model can answer from memory: the answer has to come from the passages the agent
retrieves. ``num_passages`` sets the corpus size (one passage per entity): about 2.5% countries, 20%
cities, 15% organisations and the rest people. The passages, by entity type:

    Country: "<C> is a country . The capital of <C> is <K> ."
    City:    "<K> is a city in <C> . <K> was founded in <year> ."
    Org:     "<O> is a <kind> based in <K> . <O> was founded in <year> ."
    Person:  "<P> is a <job> . <P> was born in <K> in <year> . <P> works for <O> ."

Questions (``make_question(world, seed, kinds)``) are single-hop (one fact of one entity), bridge
(a fact of the entity a first fact names: "In which country was <P> born ?" = P's city, then that
city's country) or comparison (which of two entities has the earlier year). Each carries its hops:
the searches a planner makes, the passage that answers each and the sentence it quotes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from agentcollapse.envs.searchqa.data import Dataset, Hop, Passage, Question

KINDS = ("single", "bridge", "comparison")
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kr", "tr", "th", "sh", "vr", "qu")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou", "y")
_CODAS = ("", "", "", "n", "r", "l", "s", "th", "m", "x")
ORG_KINDS = ("guild", "company", "institute", "bank", "press", "society", "academy", "foundry")
JOBS = ("painter", "sailor", "engineer", "chemist", "poet", "architect", "merchant", "astronomer", "weaver", "surgeon", "judge", "baker")


@dataclass(frozen=True)
class Country:
    name: str
    capital: int  # city index
    passage: int


@dataclass(frozen=True)
class City:
    name: str
    country: int
    year: int
    passage: int


@dataclass(frozen=True)
class Org:
    name: str
    kind: str
    city: int
    year: int
    passage: int


@dataclass(frozen=True)
class Person:
    name: str
    job: str
    city: int
    year: int
    org: int
    passage: int


@dataclass
class World:
    countries: list[Country]
    cities: list[City]
    orgs: list[Org]
    people: list[Person]
    passages: list[Passage]

    def dataset(self) -> Dataset:
        return Dataset(passages=self.passages, source="generated")


class _Names:
    """Unique invented words (capitalised), across every entity type of a world."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.used = rng, set()

    def word(self, syllables: tuple[int, int] = (2, 3)) -> str:
        for _ in range(1000):
            n = self.rng.randint(*syllables)
            word = "".join(self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS) for _ in range(n))
            if word not in self.used and 4 <= len(word) <= 12:
                self.used.add(word)
                return word.capitalize()
        return self.word((syllables[0] + 1, syllables[1] + 1))


def generate_world(num_passages: int = 2000, world_seed: int = 0) -> World:
    """The world of ``world_seed`` with ``num_passages`` passages (at least 40), one per entity."""
    if num_passages < 40:
        raise ValueError(f"num_passages={num_passages} must be >= 40")
    rng = random.Random(f"searchqa-world-{world_seed}")
    names = _Names(rng)
    n_countries = max(4, num_passages // 40)
    n_cities = max(8, num_passages // 5)
    n_orgs = max(6, num_passages * 3 // 20)
    n_people = num_passages - n_countries - n_cities - n_orgs

    country_names = [names.word() for _ in range(n_countries)]
    city_country = [i % n_countries for i in range(n_cities)]  # every country has a city
    rng.shuffle(city_country)
    city_names = [names.word() for _ in range(n_cities)]
    city_years = [rng.randint(800, 1700) for _ in range(n_cities)]
    by_country: dict[int, list[int]] = {}
    for k, c in enumerate(city_country):
        by_country.setdefault(c, []).append(k)
    capitals = [rng.choice(by_country[c]) for c in range(n_countries)]
    org_names = [f"{names.word()} {rng.choice(ORG_KINDS).capitalize()}" for _ in range(n_orgs)]
    first_names = [names.word((1, 2)) for _ in range(max(20, n_people // 6))]
    last_names = [names.word() for _ in range(max(20, n_people // 3))]
    people_names: list[str] = []
    seen: set[str] = set()
    while len(people_names) < n_people:
        full = f"{rng.choice(first_names)} {rng.choice(last_names)}"
        if full not in seen:
            seen.add(full)
            people_names.append(full)

    passages: list[Passage] = []
    countries, cities, orgs, people = [], [], [], []
    for c, name in enumerate(country_names):
        capital = city_names[capitals[c]]
        countries.append(Country(name, capitals[c], len(passages)))
        passages.append(Passage(name, f"{name} is a country . The capital of {name} is {capital} ."))
    for k, name in enumerate(city_names):
        country = country_names[city_country[k]]
        cities.append(City(name, city_country[k], city_years[k], len(passages)))
        passages.append(Passage(name, f"{name} is a city in {country} . {name} was founded in {city_years[k]} ."))
    for name in org_names:
        kind, city, year = name.rsplit(" ", 1)[1].lower(), rng.randrange(n_cities), rng.randint(1700, 1990)
        orgs.append(Org(name, kind, city, year, len(passages)))
        passages.append(Passage(name, f"{name} is {_a(kind)} based in {city_names[city]} . {name} was founded in {year} ."))
    for name in people_names:
        job, city, year, org = rng.choice(JOBS), rng.randrange(n_cities), rng.randint(1800, 1990), rng.randrange(n_orgs)
        people.append(Person(name, job, city, year, org, len(passages)))
        passages.append(
            Passage(name, f"{name} is {_a(job)} . {name} was born in {city_names[city]} in {year} . {name} works for {org_names[org]} .")
        )
    return World(countries, cities, orgs, people, passages)


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


# -- the sentences a planner quotes (each is a sentence of the entity's passage) --------------------
def _born(w: World, p: Person) -> str:
    return f"{p.name} was born in {w.cities[p.city].name} in {p.year}"


def _works(w: World, p: Person) -> str:
    return f"{p.name} works for {w.orgs[p.org].name}"


def _in_country(w: World, k: City) -> str:
    return f"{k.name} is a city in {w.countries[k.country].name}"


def _city_founded(k: City) -> str:
    return f"{k.name} was founded in {k.year}"


def _based(w: World, o: Org) -> str:
    return f"{o.name} is {_a(o.kind)} based in {w.cities[o.city].name}"


def _org_founded(o: Org) -> str:
    return f"{o.name} was founded in {o.year}"


def _capital(w: World, c: Country) -> str:
    return f"The capital of {c.name} is {w.cities[c.capital].name}"


def _single(w: World, rng: random.Random) -> Question:
    choice = rng.randrange(8)
    if choice < 3:
        p = rng.choice(w.people)
        text, sentence, value = (
            (f"Where was {p.name} born ?", _born(w, p), w.cities[p.city].name),
            (f"Which organisation does {p.name} work for ?", _works(w, p), w.orgs[p.org].name),
            (f"In which year was {p.name} born ?", _born(w, p), str(p.year)),
        )[choice]
        return Question(text, (value,), "single", (Hop(p.name, p.passage, sentence, value),))
    if choice < 5:
        k = rng.choice(w.cities)
        country = w.countries[k.country].name
        text, sentence, value = (
            (f"In which country is {k.name} ?", _in_country(w, k), country),
            (f"In which year was {k.name} founded ?", _city_founded(k), str(k.year)),
        )[choice - 3]
        return Question(text, (value,), "single", (Hop(k.name, k.passage, sentence, value),))
    if choice < 7:
        o = rng.choice(w.orgs)
        text, sentence, value = (
            (f"Where is {o.name} based ?", _based(w, o), w.cities[o.city].name),
            (f"In which year was {o.name} founded ?", _org_founded(o), str(o.year)),
        )[choice - 5]
        return Question(text, (value,), "single", (Hop(o.name, o.passage, sentence, value),))
    c = rng.choice(w.countries)
    capital = w.cities[c.capital].name
    return Question(f"What is the capital of {c.name} ?", (capital,), "single", (Hop(c.name, c.passage, _capital(w, c), capital),))


def _bridge(w: World, rng: random.Random) -> Question:
    choice = rng.randrange(4)
    if choice == 3:
        o = rng.choice(w.orgs)
        k = w.cities[o.city]
        first = Hop(o.name, o.passage, _based(w, o), k.name)
        country = w.countries[k.country].name
        return Question(
            f"In which country is {o.name} based ?", (country,), "bridge", (first, Hop(k.name, k.passage, _in_country(w, k), country))
        )
    p = rng.choice(w.people)
    k, o = w.cities[p.city], w.orgs[p.org]
    if choice == 0:
        country = w.countries[k.country].name
        hops = (Hop(p.name, p.passage, _born(w, p), k.name), Hop(k.name, k.passage, _in_country(w, k), country))
        return Question(f"In which country was {p.name} born ?", (country,), "bridge", hops)
    if choice == 1:
        city = w.cities[o.city].name
        hops = (Hop(p.name, p.passage, _works(w, p), o.name), Hop(o.name, o.passage, _based(w, o), city))
        return Question(f"Where is the organisation that {p.name} works for based ?", (city,), "bridge", hops)
    hops = (Hop(p.name, p.passage, _born(w, p), k.name), Hop(k.name, k.passage, _city_founded(k), str(k.year)))
    return Question(f"In which year was the city where {p.name} was born founded ?", (str(k.year),), "bridge", hops)


def _comparison(w: World, rng: random.Random) -> Question:
    choice = rng.randrange(3)
    pool, sentence, template = (
        (w.people, lambda e: _born(w, e), "Who was born earlier , {a} or {b} ?"),
        (w.orgs, _org_founded, "Which was founded earlier , {a} or {b} ?"),
        (w.cities, _city_founded, "Which city is older , {a} or {b} ?"),
    )[choice]
    while True:
        a, b = rng.sample(pool, 2)
        if a.year != b.year:
            break
    winner = a if a.year < b.year else b
    hops = (Hop(a.name, a.passage, sentence(a), str(a.year)), Hop(b.name, b.passage, sentence(b), str(b.year)))
    return Question(template.format(a=a.name, b=b.name), (winner.name,), "comparison", hops, conclusion=winner.name)


def make_question(world: World, seed: int, kinds: Sequence[str] = KINDS) -> Question:
    """The question of ``seed``: its kind drawn uniformly from ``kinds``, then its entities."""
    rng = random.Random(seed)
    kind = rng.choice(list(kinds))
    return {"single": _single, "bridge": _bridge, "comparison": _comparison}[kind](world, rng)


__all__ = ["JOBS", "KINDS", "ORG_KINDS", "World", "generate_world", "make_question"]
