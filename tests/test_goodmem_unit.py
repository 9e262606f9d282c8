"""Unit tests of the GoodMem pure parts: chunking, create-request parsing, wire forms, tokens, validation."""

from __future__ import annotations

import base64
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.goodmem.apikeys import api_key_json
from proxy.core.goodmem.auth import Principal, extract_api_key
from proxy.core.goodmem.chunking import DEFAULT_CHUNKING, chunk_text, parse_chunking
from proxy.core.goodmem.content import is_text_type, parse_create_request
from proxy.core.goodmem.paging import decode_offset, decode_token, encode_offset, encode_token
from proxy.core.goodmem.records import MemoryRecord, chunk_json, memory_json, record_from_long_term
from proxy.core.goodmem.validation import apply_labels, check_labels, check_uuid
from proxy.errors import BadRequest

SID = "01a0ace1-f672-7105-9642-bf658ff8f51a"


def recursive(size: int, overlap: int, **extra: object) -> dict[str, object]:
    return {"recursive": {"chunkSize": size, "chunkOverlap": overlap, "keepStrategy": "KEEP_END", **extra}}


# --- chunking -------------------------------------------------------------------------------------


def test_none_is_one_chunk_of_everything() -> None:
    text = "  line one\nline two  "
    chunks = chunk_text(text, parse_chunking({"none": {}}))
    assert [(c.start, c.end, c.text) for c in chunks] == [(0, len(text), text)]


def test_recursive_prefers_paragraphs() -> None:
    text = "Alpha beta gamma.\n\nDelta epsilon zeta eta theta."
    chunks = chunk_text(text, parse_chunking(recursive(30, 0)))
    assert [c.text for c in chunks] == ["Alpha beta gamma.", "Delta epsilon zeta eta theta."]
    assert chunks[1].start == text.index("Delta")


def test_recursive_overlap_and_limit() -> None:
    text = " ".join(f"w{i}" for i in range(200))
    chunks = chunk_text(text, parse_chunking(recursive(40, 10)))
    assert all(len(c.text) <= 40 for c in chunks)
    assert all(b.start < a.end for a, b in itertools.pairwise(chunks))  # they overlap
    assert chunks[0].start == 0 and chunks[-1].end == len(text)


def test_keep_start_puts_separator_first() -> None:
    text = "one;two;three;four"
    cfg = parse_chunking(
        {"recursive": {"chunkSize": 9, "chunkOverlap": 0, "separators": [";"], "keepStrategy": "KEEP_START"}}
    )
    assert [c.text for c in chunk_text(text, cfg)] == ["one;two", ";three", ";four"]


def test_regex_separator() -> None:
    cfg = parse_chunking(
        {"recursive": {"chunkSize": 6, "chunkOverlap": 0, "separators": [r"\d"], "separatorIsRegex": True}}
    )
    assert [c.text for c in chunk_text("abc1def2ghi", cfg)] == ["abc1", "def2", "ghi"]


def test_sentence_packs_sentences() -> None:
    text = "First one. Second one! Third one? Fourth."
    cfg = parse_chunking(
        {"sentence": {"maxChunkSize": 25, "minChunkSize": 5, "lengthMeasurement": "CHARACTER_COUNT"}}
    )
    chunks = chunk_text(text, cfg)
    assert [c.text for c in chunks] == ["First one. Second one!", "Third one? Fourth."]
    assert all(text[c.start : c.end] == c.text for c in chunks)


def test_token_count_measure() -> None:
    text = "a b c d e f g h i j"
    cfg = parse_chunking(recursive(4, 0, lengthMeasurement="TOKEN_COUNT"))
    assert [c.text for c in chunk_text(text, cfg)] == ["a b c d", "e f g h", "i j"]


@settings(max_examples=150, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list("ab .!?\n\u00e9\u4e2d")), max_size=300),
    size=st.integers(1, 60),
    overlap_frac=st.floats(0, 0.9),
    kind=st.sampled_from(["recursive", "sentence", "none"]),
)
def test_chunks_are_exact_spans(text: str, size: int, overlap_frac: float, kind: str) -> None:
    overlap = min(int(size * overlap_frac), size - 1)
    cfg = {
        "recursive": recursive(size, overlap),
        "sentence": {"sentence": {"maxChunkSize": size, "minChunkSize": 0}},
        "none": {"none": {}},
    }[kind]
    chunks = chunk_text(text, parse_chunking(cfg))
    for i, c in enumerate(chunks):
        assert c.sequence == i
        assert text[c.start : c.end] == c.text
        assert c.text.strip() or kind == "none"
        if kind != "none":
            assert len(c.text) <= size
    # every non-space character is covered by some chunk
    covered = set()
    for c in chunks:
        covered.update(range(c.start, c.end))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"recursive": {"chunkSize": 0, "chunkOverlap": 0}},
        {"recursive": {"chunkSize": 10, "chunkOverlap": 10}},
        {"none": {}, "recursive": {"chunkSize": 10, "chunkOverlap": 1}},
        {"sentence": {"maxChunkSize": 5, "minChunkSize": 9}},
        {"recursive": {"chunkSize": 10, "chunkOverlap": 1, "lengthMeasurement": "WORDS"}},
        "recursive",
    ],
)
def test_bad_chunking_is_400(bad: object) -> None:
    with pytest.raises(BadRequest):
        parse_chunking(bad)


def test_default_chunking_round_trip() -> None:
    wire = DEFAULT_CHUNKING.to_json()
    assert wire["recursive"]["chunkSize"] == 512 and wire["recursive"]["keepStrategy"] == "KEEP_END"
    assert parse_chunking(wire).to_json() == wire


# --- create requests ------------------------------------------------------------------------------


def test_plain_text_defaults_content_type() -> None:
    req = parse_create_request({"spaceId": SID, "originalContent": "héllo", "originalContentB64": None})
    assert req.content_type == "text/plain" and req.content == "héllo".encode() and req.text == "héllo"


def test_base64_text_type() -> None:
    data = base64.b64encode(b'{"a": 1}').decode()
    req = parse_create_request(
        {"spaceId": SID, "originalContentB64": data, "contentType": "application/json"}
    )
    assert req.text == '{"a": 1}'


@pytest.mark.parametrize(
    "body",
    [
        {"originalContent": "x"},
        {"spaceId": SID},
        {"spaceId": SID, "originalContent": "x", "originalContentB64": "eA=="},
        {"spaceId": SID, "originalContentB64": "eA=="},
        {"spaceId": SID, "originalContentB64": "@@@", "contentType": "text/plain"},
        {"spaceId": SID, "originalContentB64": "eA==", "contentType": "application/pdf"},
        {"spaceId": SID, "originalContent": ""},
        {"spaceId": SID, "originalContent": "x", "metadata": [1]},
        {"spaceId": SID, "originalContent": "x", "memoryId": "not-a-uuid"},
        {"spaceId": SID, "originalContent": "x", "chunkingConfig": {"recursive": {}}},
    ],
)
def test_bad_create_requests(body: dict[str, object]) -> None:
    with pytest.raises(BadRequest):
        parse_create_request(body)


def test_text_types() -> None:
    assert is_text_type("text/markdown; charset=utf-8")
    assert is_text_type("application/vnd.api+json")
    assert not is_text_type("image/png")


# --- wire forms -----------------------------------------------------------------------------------


def _record() -> MemoryRecord:
    return MemoryRecord.for_content(
        memory_id="m1",
        space_id=SID,
        content_type="text/plain",
        content=b"hello",
        actor_id="u1",
        now=1000,
        metadata={"k": "v"},
        chunking_config={"none": {}},
        content_ref=None,
        chunk_count=1,
    )


def test_memory_json_fields() -> None:
    rec = _record()
    out = memory_json(rec, include_content=False)
    for key in (
        "memoryId",
        "spaceId",
        "contentType",
        "processingStatus",
        "pageImageStatus",
        "pageImageCount",
        "createdAt",
        "updatedAt",
        "createdById",
        "updatedById",
    ):
        assert key in out
    assert "originalContent" not in out and out["originalContentLength"] == 5
    assert base64.b64decode(memory_json(rec, include_content=True)["originalContent"]) == b"hello"
    assert MemoryRecord.from_source(rec.to_source()).to_source() == rec.to_source()


def test_long_term_memory_as_memory_and_chunk() -> None:
    src = {"memory": "a fact", "memory_container_id": SID, "created_time": 5, "namespace": {"user_id": "bob"}}
    rec = record_from_long_term("d1", src, owner_id="root")
    assert rec.memory_id == "d1" and rec.space_id == SID and rec.from_long_term
    assert rec.metadata == {"namespace": {"user_id": "bob"}}
    chunk = chunk_json("d1", src)
    assert chunk["memoryId"] == "d1" and chunk["chunkId"] == "d1"
    assert (chunk["startOffset"], chunk["endOffset"]) == (0, len("a fact"))


def test_api_key_json_lifecycle() -> None:
    doc = {
        "api_key_id": "k",
        "user_id": "u",
        "key_prefix": "gm_x",
        "status": "ACTIVE",
        "created_at": 1,
        "updated_at": 1,
    }
    assert api_key_json(doc, now=2)["lifecycleState"] == "USABLE"
    assert api_key_json({**doc, "expires_at": 2}, now=3)["status"] == "INACTIVE"
    assert api_key_json({**doc, "revoked_at": 2}, now=3)["lifecycleState"] == "REVOKED"
    assert api_key_json({**doc, "valid_from": 9}, now=3)["lifecycleState"] == "NOT_YET_VALID"


# --- auth, tokens, validation ---------------------------------------------------------------------


def test_extract_api_key() -> None:
    assert extract_api_key({"X-API-Key": " gm_a "}) == "gm_a"
    assert extract_api_key({"Authorization": "Bearer gm_b"}) == "gm_b"
    assert extract_api_key({"Authorization": "Basic abc"}) is None
    assert extract_api_key({}) is None
    assert Principal("u", "k", ("ADMIN",)).is_admin and not Principal("u", "k", ("USER",)).is_admin


def test_tokens_round_trip() -> None:
    token = encode_token({"o": 50})
    assert "=" not in token and decode_token(token) == {"o": 50}
    assert decode_offset(encode_offset(7)) == 7 and decode_offset(None) == 0
    with pytest.raises(BadRequest):
        decode_offset("!!!not-a-token")


def test_labels() -> None:
    assert apply_labels({"a": "1"}, None, {"b": "2"}) == {"a": "1", "b": "2"}
    assert apply_labels({"a": "1"}, {}, None) == {}
    with pytest.raises(BadRequest):
        apply_labels({}, {"a": "1"}, {"b": "2"})
    with pytest.raises(BadRequest):
        check_labels({"Bad Key": "x"}, strict_keys=True)
    with pytest.raises(BadRequest):
        check_labels({str(i): "x" for i in range(21)})
    with pytest.raises(BadRequest):
        check_uuid("nope", "spaceId")


# --- no half-stored memory -------------------------------------------------------------------------


class _FakeSvc:
    store = None
    embedders = None


def _container() -> Any:
    from proxy.core.containers import Container

    cfg = {"embedding_model_type": "TEXT_EMBEDDING", "embedding_model_id": "e1", "embedding_dimension": 3}
    return Container.from_source(SID, {"name": "s", "configuration": cfg, "goodmem": {"owner_id": "u1"}})


@pytest.fixture
def create_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """memories.create_memory with the store and embedder replaced by recorders."""
    from proxy.core.goodmem import memories

    calls: dict[str, list[Any]] = {"chunks": [], "records": [], "deleted": []}

    async def get_space(svc: Any, space_id: str) -> Any:
        return _container()

    async def allow(*args: Any) -> None:
        return None

    async def none_exist(svc: Any, ids: Any) -> set[str]:
        return set()

    async def write(svc: Any, container: Any, chunks: Any, refresh: bool = True) -> list[str]:
        calls["chunks"].extend(chunks)
        return [c.id for c in chunks]

    async def delete(svc: Any, container: Any, ids: Any = None, filter: Any = None) -> int:
        calls["deleted"].extend(ids or [])
        return len(ids or [])

    async def index_doc(store: Any, index: str, doc_id: str, body: Any, **kw: Any) -> None:
        calls["records"].append(doc_id)

    monkeypatch.setattr(memories, "get_space", get_space)
    monkeypatch.setattr(memories, "authorize_space", allow)
    monkeypatch.setattr(memories, "_existing_ids", none_exist)
    monkeypatch.setattr(memories, "write_long_term", write)
    monkeypatch.setattr(memories, "delete_long_term", delete)
    monkeypatch.setattr(memories.gstore, "index_doc", index_doc)
    return calls


async def test_create_stores_chunks_then_record(create_env: dict[str, list[Any]]) -> None:
    from proxy.core.goodmem.memories import create_memory

    body = {
        "spaceId": SID,
        "originalContent": "one. two. three.",
        "chunkingConfig": {"sentence": {"maxChunkSize": 6}},
    }
    record = await create_memory(_FakeSvc(), Principal("u1", "k1"), body)  # type: ignore[arg-type]
    assert record.processing_status == "COMPLETED" and record.chunk_count == 3
    assert [c.memory for c in create_env["chunks"]] == ["one.", "two.", "three."]
    assert [(c.start_offset, c.end_offset) for c in create_env["chunks"]] == [(0, 4), (5, 9), (10, 16)]
    assert create_env["records"] == [record.memory_id] and not create_env["deleted"]


async def test_failed_embedding_leaves_nothing(
    create_env: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.core.goodmem import memories
    from proxy.errors import Overloaded

    async def busy(*args: Any, **kw: Any) -> list[str]:
        raise Overloaded("embedding queue is full")

    monkeypatch.setattr(memories, "write_long_term", busy)
    with pytest.raises(Overloaded):
        await memories.create_memory(
            _FakeSvc(), Principal("u1", "k1"), {"spaceId": SID, "originalContent": "x"}
        )  # type: ignore[arg-type]
    assert not create_env["records"] and not create_env["deleted"]


async def test_failed_record_write_removes_chunks(
    create_env: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.core.goodmem import memories
    from proxy.errors import Unavailable

    async def down(*args: Any, **kw: Any) -> None:
        raise Unavailable("OpenSearch is unreachable")

    monkeypatch.setattr(memories.gstore, "index_doc", down)
    with pytest.raises(Unavailable):
        await memories.create_memory(
            _FakeSvc(), Principal("u1", "k1"), {"spaceId": SID, "originalContent": "a. b."}
        )  # type: ignore[arg-type]
    assert create_env["chunks"] and create_env["deleted"] == [c.id for c in create_env["chunks"]]
