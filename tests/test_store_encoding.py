"""The _bulk encoder (proxy/store/encoding.py): the JSON ``json.dumps`` wrote, faster, with its fallbacks."""

from __future__ import annotations

import json
import random

import pytest

from proxy.store.encoding import compact_json


def test_a_memory_document_encodes_to_the_same_values_json_reads_back() -> None:
    rng = random.Random(7)
    vector = [rng.uniform(-1, 1) for _ in range(384)] + [1e-7, -0.0, 3.0]
    doc = {
        "memory": "Grüße aus 東京 — the user's tea 🍵",
        "namespace": {"user_id": "u1", "session_id": None},
        "tags": {"topic": "tea"},
        "created_time": 1_733_000_000_000,
        "pinned": False,
        "memory_embedding": vector,
    }
    line = compact_json(doc)
    assert "\n" not in line and ", " not in line and ": " not in line  # one compact NDJSON line
    assert "東京" in line  # non-ASCII kept, as ensure_ascii=False did
    back = json.loads(line)
    assert back == doc
    # Every float is the same float64 (the shortest round-trip form), so the node indexes the same vector.
    assert [float.hex(x) for x in back["memory_embedding"]] == [float.hex(x) for x in vector]


@pytest.mark.parametrize(
    "value",
    [
        2**70,  # beyond 64 bits: orjson refuses it, json writes it
        "lone \ud800 surrogate",  # not valid UTF-8: orjson refuses it, json writes the escape-free str
    ],
)
def test_what_orjson_refuses_is_written_as_json_wrote_it(value: object) -> None:
    doc = {"metadata": {"v": value}}
    assert compact_json(doc) == json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
