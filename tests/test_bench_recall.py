"""The recall benchmark (scripts/bench/recall.py) and its text corpora: what the corpora hold, and a tiny
run through memproxy's search path on the suite's node, so the script cannot rot (no recall or timing is
asserted of the run: 300 memories say nothing about HNSW)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from scripts.bench import recall
from scripts.bench.recall_texts import FACTS, duplicate_copies, fresh_queries, text_corpus


def test_text_corpora_are_seeded_and_sized() -> None:
    for kind in ("templated", "one-template"):
        texts = text_corpus(kind, 2_000, seed=7)
        assert len(texts) == 2_000 and texts == text_corpus(kind, 2_000, seed=7)
        assert texts != text_corpus(kind, 2_000, seed=8)
    assert all(t.startswith("Note ") for t in text_corpus("one-template", 50, seed=1))


def test_the_duplicate_corpus_stores_24_facts_many_times() -> None:
    texts = text_corpus("templated-duplicates", 10_000, seed=7)
    counts = Counter(t for t in texts if "(fact " in t)
    assert len(counts) == FACTS
    assert sorted(counts.values()) == sorted(duplicate_copies(10_000).tolist())
    assert max(counts.values()) >= 500 and len(texts) == 5_000 + sum(counts.values())


def test_fresh_queries_are_not_in_the_corpus() -> None:
    corpus = set(text_corpus("one-template", 1_000, seed=7))
    assert not corpus & set(fresh_queries("one-template", 100, seed=7))


@pytest.mark.node
@pytest.mark.timeout(300)
def test_recall_benchmark_runs(opensearch_url: str) -> None:
    args = recall.parse_args(
        [
            *("--url", opensearch_url, "--n", "300", "--queries", "4", "--ef", "100"),
            *("--corpora", "diverse,templated-duplicates", "--tag=-test"),
        ]
    )
    data = asyncio.run(recall.run(args))
    assert set(data["corpora"]) == {"diverse", "templated-duplicates", "templated-duplicates-merged"}
    merged = data["corpora"]["templated-duplicates-merged"]
    assert merged["index"]["segments"] == 1 and merged["index"]["docs"] == 150 + sum(duplicate_copies(300))
    for stage in data["corpora"].values():
        for row in stage["rows"]:
            assert 0.0 <= row["memproxy R@1"] <= 1.0 and row["p50 ratio"] > 0
