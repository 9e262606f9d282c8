"""Unit tests of the GoodMem pure parts: chunking, create-request parsing, wire forms, tokens, validation."""

from __future__ import annotations

import asyncio
import base64
import itertools
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.api.goodmem.memory_wire import MemoryCreateBody
from proxy.api.goodmem.render import api_key_json, chunk_json, memory_json, processing_history_json
from proxy.api.identity import read_credentials
from proxy.core.goodmem.apikeys import ApiKey
from proxy.core.goodmem.chunking import DEFAULT_CHUNKING, chunk_text, parse_chunking
from proxy.core.goodmem.content import is_text_type
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.ids import check_uuid
from proxy.core.goodmem.paging import decode_offset, decode_token, encode_offset, encode_token
from proxy.core.goodmem.records import MemoryRecord, record_from_long_term
from proxy.core.goodmem.validation import LabelChange, check_labels
from proxy.core.identity import Principal
from proxy.core.jobs import Job
from proxy.core.services import Services
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
    assert len(chunks) > 1 and all(len(c.text) <= 40 for c in chunks)
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
    assert chunks or not text.strip(), "a text with content yields chunks"
    for i, c in enumerate(chunks):
        assert c.sequence == i
        assert text[c.start : c.end] == c.text
        assert c.text.strip() or kind == "none"
        if kind != "none":
            assert len(c.text) <= size
    # every non-space character is covered by some chunk
    covered: set[int] = set()
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
    req = MemoryCreateBody.read({"spaceId": SID, "originalContent": "héllo", "originalContentB64": None})
    assert req.content_type == "text/plain" and req.content == "héllo".encode() and req.text == "héllo"


def test_base64_text_type() -> None:
    data = base64.b64encode(b'{"a": 1}').decode()
    req = MemoryCreateBody.read(
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
        MemoryCreateBody.read(body)


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
    assert api_key_json(ApiKey.from_source(doc), now=2)["lifecycleState"] == "USABLE"
    assert api_key_json(ApiKey.from_source({**doc, "expires_at": 2}), now=3)["status"] == "INACTIVE"
    assert api_key_json(ApiKey.from_source({**doc, "revoked_at": 2}), now=3)["lifecycleState"] == "REVOKED"
    assert (
        api_key_json(ApiKey.from_source({**doc, "valid_from": 9}), now=3)["lifecycleState"] == "NOT_YET_VALID"
    )


# --- auth, tokens, validation ---------------------------------------------------------------------


def test_read_credentials() -> None:
    assert read_credentials({"X-API-Key": " gm_a "}).api_key == "gm_a"
    assert read_credentials({"Authorization": "Bearer gm_b"}).api_key == "gm_b"
    basic = read_credentials({"Authorization": "Basic " + base64.b64encode(b"root:gm_c").decode()})
    assert basic.api_key is None and basic.basic_password == "gm_c"
    assert not read_credentials({}).present
    with pytest.raises(BadRequest):
        read_credentials({"Authorization": "Basic abc"})  # not base64 of user:password
    with pytest.raises(BadRequest):
        read_credentials({"x-api-key": "k\udcff"})  # aiohttp's surrogateescape of a non-UTF-8 byte
    assert Principal("u", "k", ("ADMIN",)).is_admin and not Principal("u", "k", ("USER",)).is_admin


def test_tokens_round_trip() -> None:
    token = encode_token({"o": 50})
    assert "=" not in token and decode_token(token) == {"o": 50}
    assert decode_offset(encode_offset(7)) == 7 and decode_offset(None) == 0
    with pytest.raises(BadRequest):
        decode_offset("!!!not-a-token")


def test_labels() -> None:
    assert LabelChange.parse(None, {"b": "2"}).apply({"a": "1"}) == {"a": "1", "b": "2"}
    assert LabelChange.parse({}, None).apply({"a": "1"}) == {}
    assert LabelChange.parse(None, None).apply({"a": "1"}) == {"a": "1"}
    with pytest.raises(BadRequest):
        LabelChange.parse({"a": "1"}, {"b": "2"})
    with pytest.raises(BadRequest, match="labels may hold at most 20"):
        LabelChange.parse(None, {"k": "v"}).apply({str(i): "x" for i in range(20)})
    with pytest.raises(BadRequest):
        check_labels({"Bad Key": "x"}, strict_keys=True)
    with pytest.raises(BadRequest):
        check_labels({str(i): "x" for i in range(21)})
    with pytest.raises(BadRequest):
        check_uuid("nope", "spaceId")


# --- state owned by the application ----------------------------------------------------------------


async def test_background_work_is_cancelled_when_goodmem_closes() -> None:
    gm = GoodMem.create(Services(store=cast(Any, None), embedders=cast(Any, None)))
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def slow() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def failing() -> None:
        raise RuntimeError("best effort")

    gm.background.spawn(slow(), "slow work")
    gm.background.spawn(failing(), "failing work")
    await started.wait()
    await asyncio.sleep(0)
    assert len(gm.background) == 1  # the failure was logged and dropped
    await gm.identity.close()
    assert cancelled.is_set() and len(gm.background) == 0


def test_processing_history_lists_every_attempt_and_the_running_one() -> None:
    """Two ended attempts (lost lease, then a failure at a stage), the third running: three attempts, oldest
    first; only ended ones say ok and finishedAt; a failure names its GoodMem stage."""
    lost = {
        "attempt": 1,
        "worker": "w1",
        "started_at": 10,
        "finished_at": 30,
        "ok": False,
        "error": "attempt 1 lost its lease (worker w1)",
        "failure_stage": None,
        "stages": [],
    }
    failed = {
        "attempt": 2,
        "worker": "w2",
        "started_at": 40,
        "finished_at": 50,
        "ok": False,
        "error": "OSError: gone",
        "failure_stage": "GENERATING_EMBEDDINGS",
        "stages": [{"stage": "EXTRACTING_TEXT", "at": 41}, {"stage": "GENERATING_EMBEDDINGS", "at": 45}],
    }
    job = Job(
        job_id="00000000-0000-4000-8000-000000000001",
        kind="document_processor",
        state="RUNNING",
        payload={},
        attempts=3,
        max_attempts=5,
        not_before=60,
        created_at=1,
        updated_at=61,
        lease_owner="w3",
        lease_expires_at=90,
        started_at=60,
        stages=({"stage": "EXTRACTING_TEXT", "at": 61},),
        history=(lost, failed),
    )
    out = processing_history_json(job, 7)
    assert out["latestJob"]["status"] == "BACKGROUND_JOB_RUNNING" and out["latestJob"]["lockedBy"] == "w3"
    attempts = out["attempts"]
    assert [a["attemptId"] for a in attempts] == [1, 2, 3]
    assert [a.get("ok") for a in attempts] == [False, False, None]
    assert "finishedAt" not in attempts[2] and attempts[1]["finishedAt"] == 50
    assert attempts[1]["failureStage"] == "DOCUMENT_PROCESSING_STAGE_GENERATING_EMBEDDINGS"
    assert attempts[1]["statusMessage"] == "EXTRACTING_TEXT > GENERATING_EMBEDDINGS"
    assert attempts[2]["statusMessage"] == "EXTRACTING_TEXT" and attempts[2]["workerId"] == "w3"
    assert "failureStage" not in attempts[0] and "lost its lease" in attempts[0]["errorMessage"]


def test_access_checks_name_the_sdks_operations_and_resource_kinds() -> None:
    """``access-policy:check`` accepts exactly the operations and target kinds the Gen B SDK can send."""
    from goodmem.models.operation import Operation
    from goodmem.models.resource_kind import ResourceKind

    from proxy.core.goodmem.checks import OPERATIONS, RESOURCE_KINDS

    assert {o.value for o in Operation} == OPERATIONS
    assert set(RESOURCE_KINDS) == {k.value for k in ResourceKind}
