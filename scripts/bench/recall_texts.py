"""The text corpora of ``scripts.bench.recall`` (issue 26): agent-memory-like sentences, generated from a seed
(nothing downloaded) and embedded by memproxy's own model, so the vectors have the structure real memories
give the graph (many near neighbours from shared templates), which the synthetic low-rank vectors only
imitate.

* ``templated``: sentences from 10 templates, their slots filled from word lists;
* ``one-template``: every memory is "Note N: the team discussed item X and agreed to Y." (the closest
  neighbours differ by a number);
* ``templated-duplicates``: N / 2 templated sentences plus 24 facts each stored many times (the counts of
  the vector ``duplicates`` corpus): the same text written again and again, as agents re-save a preference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["TEXT_CORPORA", "duplicate_copies", "embed_texts", "fresh_queries", "text_corpus"]

TEXT_CORPORA = ("templated", "one-template", "templated-duplicates")
FACTS = 24

_USERS = ["Alice", "Bob", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Jules", "Kofi", "Lena"]
_PEOPLE = ["the landlord", "Dr. Patel", "the design team", "Sam", "the recruiter", "her manager", "a client"]
_TOPICS = ["the budget", "the roadmap", "a job offer", "the lease", "the migration", "hiring", "the launch"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_THINGS = [
    "dark roast coffee",
    "green tea",
    "peanuts",
    "shellfish",
    "penicillin",
    "jazz",
    "science fiction",
    "hiking",
    "Italian food",
    "window seats",
    "early flights",
    "the night shift",
]
_CITIES = ["Lisbon", "Nairobi", "Osaka", "Toronto", "Krakow", "Lima", "Austin", "Hanoi", "Oslo", "Accra"]
_JOBS = ["nurse", "data engineer", "teacher", "lawyer", "chef", "pilot", "designer", "accountant"]
_TASKS = ["renew the passport", "file the taxes", "call the bank", "book the vet", "send the invoice"]
_COMPONENTS = ["the login page", "the export job", "the mobile app", "search", "the billing service"]
_SYMPTOMS = ["it times out", "it shows a blank page", "totals are off by one", "it crashes on save"]
_LANGUAGES = ["Spanish", "Japanese", "Rust", "the piano", "Swahili", "chess", "Portuguese"]
_MONTHS = ["January", "March", "May", "July", "September", "November"]
_ACTIONS = [
    "ship it next sprint",
    "ask legal first",
    "drop it",
    "revisit in Q3",
    "split the work",
    "hire a contractor",
    "write a design doc",
]

_TEMPLATES = (
    "{user} prefers {thing} in the morning.",
    "{user} has a meeting with {person} about {topic} on {day}.",
    "{user} is allergic to {thing}.",
    "{user} lives in {city} and works as a {job}.",
    "Reminder: {user} wants to {task} before {day}.",
    "{user} asked the assistant to book a table in {city} for {count} people on {day}.",
    "{user}'s favourite thing is {thing}, mentioned while talking about {topic}.",
    "{user} reported a bug in {component}: {symptom}.",
    "{user} is learning {language} and practises every {day}.",
    "{user} travelled to {city} in {month} {year} with {person}.",
)


def _pick(rng: np.random.Generator, words: Sequence[str]) -> str:
    return str(words[int(rng.integers(len(words)))])


def _templated(n: int, rng: np.random.Generator) -> list[str]:
    out = []
    for _ in range(n):
        template = _TEMPLATES[int(rng.integers(len(_TEMPLATES)))]
        out.append(
            template.format(
                user=_pick(rng, _USERS),
                person=_pick(rng, _PEOPLE),
                topic=_pick(rng, _TOPICS),
                day=_pick(rng, _DAYS),
                thing=_pick(rng, _THINGS),
                city=_pick(rng, _CITIES),
                job=_pick(rng, _JOBS),
                task=_pick(rng, _TASKS),
                count=int(rng.integers(2, 13)),
                component=_pick(rng, _COMPONENTS),
                symptom=_pick(rng, _SYMPTOMS),
                language=_pick(rng, _LANGUAGES),
                month=_pick(rng, _MONTHS),
                year=int(rng.integers(2015, 2027)),
            )
        )
    return out


def _one_template(n: int, rng: np.random.Generator, first: int = 0) -> list[str]:
    return [
        f"Note {first + i}: the team discussed item {int(rng.integers(1, 500))} and agreed to "
        f"{_pick(rng, _ACTIONS)}."
        for i in range(n)
    ]


def duplicate_copies(n: int) -> np.ndarray:
    """Copies of each of the 24 facts: 50 to 1,500 at n = 10 k (issue 26's corpus), scaled to n."""
    return np.maximum(1, np.round(np.geomspace(50, 1500, FACTS) * n / 10_000 / 2.6)).astype(int)


def text_corpus(kind: str, n: int, seed: int) -> list[str]:
    """About ``n`` texts of corpus ``kind`` (exactly n but for ``templated-duplicates``), seeded."""
    rng = np.random.default_rng(seed)
    if kind == "templated":
        return _templated(n, rng)
    if kind == "one-template":
        return _one_template(n, rng)
    if kind == "templated-duplicates":
        facts = [f"{t} (fact {i})" for i, t in enumerate(_templated(FACTS, np.random.default_rng(seed + 11)))]
        texts = _templated(n // 2, rng) + [
            t for t, c in zip(facts, duplicate_copies(n), strict=True) for _ in range(c)
        ]
        order = rng.permutation(len(texts))
        return [texts[i] for i in order]
    raise ValueError(f"unknown text corpus {kind!r}")


def fresh_queries(kind: str, n: int, seed: int) -> list[str]:
    """Texts of the corpus' kind that it does not hold (another seed; ``one-template`` numbers past it)."""
    rng = np.random.default_rng(seed + 1_000)
    if kind == "one-template":
        return _one_template(n, rng, first=10**7)
    return _templated(n, rng)


async def embed_texts(embedder: Any, texts: Sequence[str], batch: int = 256) -> np.ndarray:
    """The model's vectors for ``texts``, each distinct text embedded once."""
    distinct = list(dict.fromkeys(texts))
    vectors: list[list[float]] = []
    for start in range(0, len(distinct), batch):
        vectors += await embedder.embed(distinct[start : start + batch])
    by_text = dict(zip(distinct, vectors, strict=True))
    return np.asarray([by_text[t] for t in texts], dtype=np.float32)
