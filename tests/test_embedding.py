"""The local embedding engine: parity with sentence-transformers, batching, overload, cancellation, errors.

The bundled all-MiniLM-L6-v2 is loaded once per module for each path under test (the default options and
the float32 reference) plus sentence-transformers itself as the oracle. No OpenSearch needed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from proxy.embedding import (  # after HF_HUB_OFFLINE: transformers reads it on import
    DEFAULT_EMBEDDER_ALIAS,
    DEFAULT_EMBEDDER_ID,
    DEFAULT_EMBEDDER_NAME,
    Embedder,
    EmbedderClosed,
    EmbedderOverloaded,
    EmbedderRegistry,
    EmbedderSpec,
    EngineOptions,
    ModelLoadError,
    UnknownEmbedder,
    default_model_path,
)
from proxy.embedding.layout import read_layout
from proxy.embedding.model import cpu_has_native_bf16, partition_by_length
from proxy.embedding.pooling import pool
from proxy.errors import BadRequest, NotFound, Overloaded
from tests.embedding_helpers import oracle_model, oracle_vectors, row_cosines

# One event loop for the module, so the models loaded by module fixtures serve every test.
async_test = pytest.mark.asyncio(loop_scope="module")

Pools = tuple[ThreadPoolExecutor, ThreadPoolExecutor]

MODEL_PATH = default_model_path()

LONG = " ".join(f"memory{i} about the quarterly sales review and the garden party" for i in range(120))
TEXTS = [
    "",
    " ",
    "\n\t  \n",
    "a",
    "The user prefers green tea over coffee in the morning.",
    "Meeting with Dana moved to Tuesday 3pm; bring the Q3 latency report.",
    LONG,  # far beyond 256 tokens: must be truncated exactly as sentence-transformers does
    LONG + " and a different ending that truncation must cut off",
    "Ünïcödé façade, naïve café, Straße, Ελληνικά, русский текст, العربية, עברית",
    "日本語のメモ。明日は雨が降るので傘を持っていく。中文测试句子。한국어 문장.",
    "🤖🚀🔥 emoji-only memories 🙂🙃 and 👩‍👩‍👧‍👦 family ZWJ sequences",
    "🙂" * 400,
    "MiXeD CaSe with    irregular     spacing\r\nand CRLF",
    "Numbers 3.14159, dates 2026-11-30, ids 7cee535f-87b7-58aa-9a5a-d51cea8a2f1d, code `x = f(y)`",
]


@pytest.fixture(scope="module")
def oracle() -> np.ndarray:
    """sentence-transformers' float32 vectors for TEXTS."""
    return oracle_vectors(TEXTS)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def default_registry() -> AsyncIterator[EmbedderRegistry]:
    async with EmbedderRegistry.from_specs([], EngineOptions()) as registry:
        yield registry


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fp32() -> AsyncIterator[Embedder]:
    spec = EmbedderSpec(id=str(uuid.uuid4()), path=MODEL_PATH, name="minilm-fp32")
    options = EngineOptions(dtype="float32", warmup=False)
    async with EmbedderRegistry.from_specs([spec], options, include_default=False) as registry:
        yield registry.get(spec.id)


class Gate:
    """Holds the compute thread, so tests can see what queues up behind a batch."""

    def __init__(self, pool: ThreadPoolExecutor):
        self.event = threading.Event()
        pool.submit(self.event.wait, 30)

    def open(self) -> None:
        self.event.set()


@pytest.fixture()
def pools() -> Iterator[Pools]:
    compute, tokenize = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
    yield compute, tokenize
    compute.shutdown(wait=False, cancel_futures=True)
    tokenize.shutdown(wait=False, cancel_futures=True)


def _small_embedder(base: Embedder, pools: Pools, max_queue: int) -> Embedder:
    """A second queue over the already-loaded fp32 model, with its own (gateable) threads."""
    embedder = Embedder(base.info, base.model, EngineOptions(max_queue=max_queue), *pools)
    embedder.start()
    return embedder


async def _until(condition: Callable[[], object], timeout: float = 30.0) -> None:
    """Waits for an event; the timeout only bounds a broken run."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.005)


# --- identity and configuration -------------------------------------------------------------------------


@async_test
async def test_default_embedder_identity(default_registry: EmbedderRegistry) -> None:
    expected = str(
        uuid.uuid5(uuid.NAMESPACE_URL, "memproxy/embedders/sentence-transformers/all-MiniLM-L6-v2")
    )
    assert expected == DEFAULT_EMBEDDER_ID
    assert default_registry.default_id == DEFAULT_EMBEDDER_ID
    assert default_registry.get(DEFAULT_EMBEDDER_ALIAS) is default_registry.get(DEFAULT_EMBEDDER_ID)
    assert default_registry.get(DEFAULT_EMBEDDER_ID.upper()) is default_registry.get(DEFAULT_EMBEDDER_ID)
    assert default_registry.names(DEFAULT_EMBEDDER_ALIAS.upper()) == [
        DEFAULT_EMBEDDER_ID, DEFAULT_EMBEDDER_NAME, DEFAULT_EMBEDDER_ALIAS
    ]  # fmt: skip
    [info] = default_registry.infos()
    assert (info.id, info.dimension, info.max_tokens, info.pooling, info.normalize) == (
        DEFAULT_EMBEDDER_ID, 384, 256, "mean", True
    )  # fmt: skip
    # device and dtype "auto" (docs/embedding.md): CUDA with float16 when present, else the CPU with bfloat16
    # where it is native and float32 elsewhere
    if torch.cuda.is_available():
        assert info.device.startswith("cuda") and info.dtype == "float16", (info.device, info.dtype)
    else:
        assert info.device == "cpu"
        assert info.dtype == ("bfloat16" if cpu_has_native_bf16() else "float32")


@async_test
async def test_unknown_embedder_is_not_found(default_registry: EmbedderRegistry) -> None:
    with pytest.raises(UnknownEmbedder) as caught:
        default_registry.get("no-such-model")
    assert isinstance(caught.value, NotFound) and caught.value.status == 404
    assert "no-such-model" in str(caught.value)
    assert issubclass(EmbedderOverloaded, Overloaded) and EmbedderOverloaded("x").status == 429


# --- parity with sentence-transformers --------------------------------------------------------------------


@async_test
async def test_fp32_parity_with_sentence_transformers(fp32: Embedder, oracle: np.ndarray) -> None:
    vectors = await fp32.embed(TEXTS)
    cosines = row_cosines(vectors, oracle)
    assert cosines.min() >= 0.9999, dict(zip(TEXTS, cosines.round(6), strict=True))
    # One at a time takes the on-loop tokenizer and single-row batches: same vectors.
    singles = [await fp32.embed_one(text) for text in TEXTS]
    assert row_cosines(singles, oracle).min() >= 0.9999


@async_test
async def test_default_path_parity_with_sentence_transformers(
    default_registry: EmbedderRegistry, oracle: np.ndarray
) -> None:
    vectors = await default_registry.get(DEFAULT_EMBEDDER_ID).embed(TEXTS)
    cosines = row_cosines(vectors, oracle)
    assert cosines.min() >= 0.999, dict(zip(TEXTS, cosines.round(6), strict=True))


@async_test
async def test_embed_counted_counts_what_the_model_reads(fp32: Embedder) -> None:
    features = oracle_model().tokenize(TEXTS)  # special tokens included, truncated at max_seq_length
    vectors, counts = await fp32.embed_counted(TEXTS)
    assert counts == features["attention_mask"].sum(dim=1).tolist()
    assert np.allclose(vectors, await fp32.embed(TEXTS), atol=1e-5)
    assert (await fp32.embed_counted(TEXTS * 2))[1] == counts * 2


@async_test
async def test_vectors_are_unit_length_and_truncated(fp32: Embedder) -> None:
    vectors = np.asarray(await fp32.embed(TEXTS))
    assert vectors.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    long_a, long_b = vectors[TEXTS.index(LONG)], vectors[TEXTS.index(LONG) + 1]
    assert float(long_a @ long_b) > 0.99999  # the differing tail lies past max_seq_length
    assert float(vectors[4] @ vectors[5]) < 0.9  # and distinct texts stay distinct


# --- batching --------------------------------------------------------------------------------------------


@async_test
async def test_concurrent_callers_get_their_own_vectors_in_order(fp32: Embedder) -> None:
    texts = [f"caller {i} remembers item {i * 7919 % 1000} from list {chr(65 + i % 26)}" for i in range(48)]
    alone = np.asarray(await fp32.embed(texts))
    calls = [texts[i : i + 1] if i % 3 else texts[i : i + 3] for i in range(0, 48, 3)]
    calls += [[t] for t in texts[1::3]] + [list(reversed(texts[2::3]))]
    batches_before = fp32.batches_run
    results = await asyncio.gather(*(fp32.embed(call) for call in calls))
    for call, vectors in zip(calls, results, strict=True):
        expected = alone[[texts.index(t) for t in call]]
        assert row_cosines(vectors, expected).min() > 0.9999
    # Concurrent callers shared forwards instead of one forward each.
    assert fp32.batches_run - batches_before < len(calls) / 2


@async_test
async def test_long_batches_do_not_block_the_event_loop(fp32: Embedder) -> None:
    """While a forward pass is in progress, the event loop still runs: a hook inside the model's forward asks
    the loop to run a callback and waits for it. Were the forward on the loop's thread, the callback could
    not run before the forward returned and the hook would give up. An ordering, not a duration: it holds on
    a fast GPU and on a busy CPU alike (the 30 s wait only bounds a broken run)."""
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()
    forwards: list[tuple[int, bool]] = []  # (thread of the forward, whether the loop ran during it)

    def during_forward(module: Any, args: Any) -> None:
        loop_ran = threading.Event()
        loop.call_soon_threadsafe(loop_ran.set)
        forwards.append((threading.get_ident(), loop_ran.wait(30)))

    handle = fp32.model.model.register_forward_pre_hook(during_forward)
    try:
        vectors = await fp32.embed([LONG[i * 7 :] for i in range(64)])
    finally:
        handle.remove()
    assert len(vectors) == 64 and forwards
    assert all(thread != loop_thread and loop_ran for thread, loop_ran in forwards), forwards


def test_partition_by_length_cuts_padding_only_when_it_pays() -> None:
    assert partition_by_length([30] * 40, overhead=160) == [(0, 40)]
    groups = partition_by_length([12] * 30 + [250] * 2, overhead=160)
    assert groups == [(0, 30), (30, 32)]
    mixed = sorted((7 * i) % 200 + 5 for i in range(100))
    groups = partition_by_length(mixed, overhead=160)
    assert 1 < len(groups) < 20  # several groups, so the contiguity below is checked at least once
    assert groups[0][0] == 0 and groups[-1][1] == 100
    assert all(a[1] == b[0] for a, b in itertools.pairwise(groups))


# --- overload, cancellation, shutdown --------------------------------------------------------------------


@async_test
async def test_full_queue_refuses_at_once(fp32: Embedder, pools: Pools) -> None:
    embedder = _small_embedder(fp32, pools, max_queue=4)
    gate = Gate(pools[0])
    try:
        first = asyncio.create_task(embedder.embed(["in flight"]))
        await _until(lambda: embedder.queued == 0 and not first.done() and embedder._inflight)
        waiting = asyncio.create_task(embedder.embed(["q1", "q2", "q3", "q4"]))
        await _until(lambda: embedder.queued == 4)
        # The compute thread is held by the gate, so nothing can drain: a refusal here did not wait for room
        # (were it to wait, wait_for's liveness bound would raise TimeoutError instead).
        with pytest.raises(EmbedderOverloaded) as caught:
            await asyncio.wait_for(embedder.embed(["one too many"]), timeout=30)
        assert caught.value.status == 429
        with pytest.raises(EmbedderOverloaded):  # bigger than the queue and the queue is busy
            await asyncio.wait_for(embedder.embed([f"t{i}" for i in range(6)]), timeout=30)
        assert embedder.queued == 4 and not first.done() and not waiting.done()  # still held, nothing drained
        gate.open()
        assert len(await first) == 1 and len(await waiting) == 4
        # A call bigger than the whole queue is still served when the queue is idle.
        assert len(await embedder.embed([f"bulk {i}" for i in range(6)])) == 6
        assert embedder.queued == 0
    finally:
        gate.open()
        await embedder.close()


@async_test
async def test_cancelled_callers_cost_no_compute(fp32: Embedder, pools: Pools) -> None:
    embedder = _small_embedder(fp32, pools, max_queue=16)
    gate = Gate(pools[0])
    try:
        in_batch = asyncio.create_task(embedder.embed(["taken into a batch, then abandoned"]))
        await _until(lambda: bool(embedder._inflight))
        queued = asyncio.create_task(embedder.embed(["still queued", "when", "cancelled"]))
        kept = asyncio.create_task(embedder.embed(["kept"]))
        await _until(lambda: embedder.queued == 4)
        in_batch.cancel()
        queued.cancel()
        await asyncio.sleep(0)
        assert embedder.queued == 1  # the cancelled texts gave their room back at once
        gate.open()
        assert len(await kept) == 1
        for task in (in_batch, queued):
            with pytest.raises(asyncio.CancelledError):
                await task
        assert embedder.texts_computed == 1  # only "kept" reached the model
    finally:
        gate.open()
        await embedder.close()


@async_test
async def test_close_fails_waiting_callers_instead_of_hanging(fp32: Embedder, pools: Pools) -> None:
    embedder = _small_embedder(fp32, pools, max_queue=16)
    gate = Gate(pools[0])
    try:
        callers = [asyncio.create_task(embedder.embed(["in flight"]))]
        await _until(lambda: bool(embedder._inflight))
        callers += [asyncio.create_task(embedder.embed([f"queued {i}"])) for i in range(2)]
        await _until(lambda: embedder.queued == 2)
        await asyncio.wait_for(embedder.close(), timeout=2)
        for caller in callers:
            with pytest.raises(EmbedderClosed):
                await asyncio.wait_for(caller, timeout=2)
        with pytest.raises(EmbedderClosed):
            await embedder.embed(["after close"])
    finally:
        gate.open()


def test_batch_size_defaults_by_device() -> None:
    assert EngineOptions().batch_size_for("cpu") == 32
    assert EngineOptions().batch_size_for("cuda:0") == 256
    assert EngineOptions(max_batch_size=7).batch_size_for("cpu") == 7
    with pytest.raises(ValueError):
        EngineOptions(max_batch_size=0)


@async_test
async def test_small_batches_let_the_first_writer_finish_first(fp32: Embedder, pools: Pools) -> None:
    """Two callers of 100 texts each, queued together: on CPU (32-text batches) the first gets its vectors
    while the second's texts still wait, so its next step (a ``_bulk``) overlaps the second's embedding.
    One 256-text batch would finish both at the same moment."""
    embedder = _small_embedder(fp32, pools, max_queue=1024)
    gate = Gate(pools[0])
    try:
        first = asyncio.create_task(embedder.embed([f"first writer, memory {i}" for i in range(100)]))
        second = asyncio.create_task(embedder.embed([f"second writer, memory {i}" for i in range(100)]))
        # every text queued, or in the batch already cut and waiting for the gated compute thread
        await _until(lambda: embedder.queued + len(embedder._inflight) == 200)
        gate.open()
        await first
        assert not second.done() and embedder.queued > 0
        assert len(await second) == 100
        assert embedder.batches_run == 7  # ceil(200 / 32)
    finally:
        gate.open()
        await embedder.close()


async def test_bad_inputs(fp32: Embedder) -> None:
    assert await fp32.embed([]) == []
    with pytest.raises(TypeError):
        await fp32.embed("a single string is not a list of texts")
    with pytest.raises(BadRequest):
        await fp32.embed(["fine", None])  # type: ignore[list-item]
    assert fp32.queued == 0


# --- model loading ---------------------------------------------------------------------------------------


@async_test
async def test_bad_model_path_fails_at_start() -> None:
    missing = "/nonexistent/models/not-here"
    registry = EmbedderRegistry.from_specs(
        [EmbedderSpec(id=str(uuid.uuid4()), path=missing)], EngineOptions(warmup=False)
    )
    with pytest.raises(ModelLoadError) as caught:
        await registry.start()
    assert missing in str(caught.value) and "no such directory" in str(caught.value)
    assert registry.infos() == []


@async_test
async def test_directory_without_a_model_fails_at_start(tmp_path: Path) -> None:
    spec = EmbedderSpec(id=str(uuid.uuid4()), path=str(tmp_path))
    registry = EmbedderRegistry.from_specs([spec], EngineOptions(warmup=False), include_default=False)
    with pytest.raises(ModelLoadError, match=str(tmp_path)):
        await registry.start()


def _linked_model(tmp_path: Path, modules: list[dict[str, str]], pooling: dict[str, object]) -> Path:
    """The bundled model's files, with our own modules.json and pooling config."""
    for item in Path(MODEL_PATH).iterdir():
        if item.is_file() and item.name != "modules.json":
            (tmp_path / item.name).symlink_to(item)
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return tmp_path


def test_layout_follows_modules_and_pooling_config(tmp_path: Path) -> None:
    assert read_layout(Path(MODEL_PATH)).pooling == ("mean",)
    modules = [
        {"idx": "0", "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": "1", "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    layout = read_layout(_linked_model(tmp_path, modules, {"pooling_mode_cls_token": True}))
    assert (layout.pooling, layout.normalize, layout.max_seq_length) == (("cls",), False, 256)


def test_unsupported_modules_are_refused(tmp_path: Path) -> None:
    modules = [
        {"idx": "0", "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": "1", "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": "2", "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
    ]
    with pytest.raises(ModelLoadError, match="Dense"):
        read_layout(_linked_model(tmp_path, modules, {"pooling_mode": "mean"}))


@pytest.mark.parametrize("mode", ["mean", "cls", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"])
def test_pooling_matches_sentence_transformers(mode: str) -> None:
    import torch
    from sentence_transformers.sentence_transformer.modules import Pooling

    generator = torch.Generator().manual_seed(7)
    hidden = torch.randn(5, 9, 16, generator=generator)
    lengths = torch.tensor([9, 1, 4, 7, 2])
    mask = (torch.arange(9).unsqueeze(0) < lengths.unsqueeze(1)).long()
    expected = Pooling(16, pooling_mode=mode)({"token_embeddings": hidden, "attention_mask": mask})
    ours = pool(hidden, mask, (mode,), normalize=False)
    torch.testing.assert_close(ours, expected["sentence_embedding"], rtol=1e-5, atol=1e-5)
