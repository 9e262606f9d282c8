"""The embedding queue's fair share, on a fake model (no node, no torch work): one caller's backlog neither
refuses nor delays another caller's texts (docs/embedding.md, "Fair share").

The fake model's forward waits on a gate the test holds, so what sits in the queue is exactly what the test
put there; each batch the model runs is recorded, to check the round-robin order.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest
import pytest_asyncio

from proxy.embedding import Embedder, EmbedderInfo, EmbedderOverloaded, EngineOptions
from proxy.embedding.errors import CallerShareFull
from proxy.embedding.fairness import ANONYMOUS, current_caller, set_caller


class FakeModel:
    """Token ids are the text itself (one id per text: its index in ``names``); vectors are [id]."""

    max_tokens = 8
    max_chars = 8 * 64
    device = "cpu"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.batches: list[list[str]] = []
        self.names: list[str] = []
        self.tokenized: list[int] = []  # the length of every text tokenize() was given

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        self.tokenized.extend(len(t) for t in texts)
        ids = []
        for text in texts:
            self.names.append(text)
            ids.append([len(self.names) - 1])
        return ids

    def embed_tokens(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        if not self.gate.wait(30):  # bounds a broken run only
            raise RuntimeError("gate never opened")
        self.batches.append([self.names[ids[0]] for ids in sequences])
        return [[float(ids[0])] for ids in sequences]


Make = Callable[..., tuple[Embedder, FakeModel]]

INFO = EmbedderInfo(
    id="fake", name="fake", dimension=1, max_tokens=8, model_path="-", pooling="mean", normalize=False,
    device="cpu", dtype="float32",
)  # fmt: skip


@pytest_asyncio.fixture(loop_scope="function")
async def make() -> AsyncIterator[Make]:
    pools = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
    made: list[tuple[Embedder, FakeModel]] = []

    def build(**options: object) -> tuple[Embedder, FakeModel]:
        model = FakeModel()
        embedder = Embedder(INFO, model, EngineOptions(**options), *pools)  # type: ignore[arg-type]
        embedder.start()
        made.append((embedder, model))
        return embedder, model

    yield build
    for embedder, model in made:
        model.gate.set()
        await embedder.close()
    for pool in pools:
        pool.shutdown(wait=False, cancel_futures=True)


def as_caller(caller: str, embedder: Embedder, texts: list[str]) -> asyncio.Task[list[list[float]]]:
    """``embed(texts)`` as ``caller`` (the task copies the context at creation, as a request's tasks do)."""
    token = set_caller(caller)
    try:
        return asyncio.create_task(embedder.embed(texts))
    finally:
        current_caller.reset(token)


async def until(condition: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.002)


async def hold_compute(embedder: Embedder, model: FakeModel) -> asyncio.Task[list[list[float]]]:
    """A first text, taken into a batch that waits at the gate: everything queued after it stays queued."""
    model.gate.clear()
    first = as_caller("warm", embedder, ["in flight"])
    await until(lambda: embedder.queued == 0 and model.names)
    await asyncio.sleep(0.01)
    return first


@pytest.mark.asyncio(loop_scope="function")
async def test_limit_is_a_floor_of_the_share_and_at_least_one() -> None:
    assert EngineOptions(max_queue=1024, caller_share=0.5).caller_limit == 512
    assert EngineOptions(max_queue=10, caller_share=0.25).caller_limit == 2
    assert EngineOptions(max_queue=3, caller_share=0.1).caller_limit == 1
    assert EngineOptions(max_queue=8, caller_share=1.0).caller_limit == 8
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError):
            EngineOptions(caller_share=bad)


@pytest.mark.asyncio(loop_scope="function")
async def test_a_caller_over_its_share_is_refused_while_others_still_queue(make: Make) -> None:
    embedder, model = make(max_queue=8, caller_share=0.5, warmup=False)
    first = await hold_compute(embedder, model)
    a = as_caller("tenant-a", embedder, [f"a{i}" for i in range(4)])
    await until(lambda: embedder.held_by("tenant-a") == 4)
    with pytest.raises(CallerShareFull) as refused:
        await asyncio.wait_for(as_caller("tenant-a", embedder, ["a-more"]), timeout=30)
    assert refused.value.status == 429
    assert (
        "this caller" in refused.value.message
        and "share of the queue (4 of 8 texts)" in refused.value.message
    )
    # Another caller is not refused: the other half of the queue is its.
    b = as_caller("tenant-b", embedder, [f"b{i}" for i in range(4)])
    await until(lambda: embedder.held_by("tenant-b") == 4)
    # Now the whole queue is held: a third caller meets the global bound, worded as such.
    with pytest.raises(EmbedderOverloaded) as full:
        await asyncio.wait_for(as_caller("tenant-c", embedder, ["c0"]), timeout=30)
    assert not isinstance(full.value, CallerShareFull) and "8 of 8 texts already queued" in full.value.message
    model.gate.set()
    assert len(await a) == 4 and len(await b) == 4 and len(await first) == 1
    assert embedder.queued == 0 and embedder.held_by("tenant-a") == 0


@pytest.mark.asyncio(loop_scope="function")
async def test_a_bulk_call_over_the_share_is_served_alone_and_leaves_room(make: Make) -> None:
    embedder, model = make(max_queue=8, caller_share=0.5, max_batch_size=4, warmup=False)
    first = await hold_compute(embedder, model)
    bulk = as_caller("bulk", embedder, [f"bulk{i}" for i in range(20)])  # more than the whole queue
    await until(lambda: embedder.held_by("bulk") == 20)
    # It counts as its share (4 of 8) against the queue, so others still get the rest.
    others = [as_caller(f"user{i}", embedder, [f"u{i}"]) for i in range(4)]
    await until(lambda: embedder.queued == 24)
    with pytest.raises(EmbedderOverloaded):
        await asyncio.wait_for(as_caller("user9", embedder, ["u9"]), timeout=30)
    with pytest.raises(CallerShareFull):  # and the bulk caller itself waits for its first call to drain
        await asyncio.wait_for(as_caller("bulk", embedder, ["bulk-more"]), timeout=30)
    model.gate.set()
    assert len(await bulk) == 20 and len(await first) == 1
    assert [len(v) for v in await asyncio.gather(*others)] == [1, 1, 1, 1]


@pytest.mark.asyncio(loop_scope="function")
async def test_batches_take_callers_in_turn(make: Make) -> None:
    """A backlog of 40 texts queued first; another caller's 2 texts, queued after it, run in the very next
    batch, not after the backlog."""
    embedder, model = make(max_queue=64, caller_share=1.0, max_batch_size=4, warmup=False)
    first = await hold_compute(embedder, model)
    backlog = as_caller("heavy", embedder, [f"h{i}" for i in range(40)])
    await until(lambda: embedder.held_by("heavy") == 40)
    light = as_caller("light", embedder, ["l0", "l1"])
    await until(lambda: embedder.held_by("light") == 2)
    model.gate.set()
    assert len(await light) == 2
    assert not backlog.done()  # the light caller did not wait for the backlog
    await backlog
    await first
    assert model.batches[0] == ["in flight"]
    assert model.batches[1] == ["h0", "l0", "h1", "l1"]  # one text from each caller in turn
    assert [t for batch in model.batches[2:] for t in batch] == [f"h{i}" for i in range(2, 40)]


@pytest.mark.asyncio(loop_scope="function")
async def test_a_cancelled_caller_gives_its_share_back(make: Make) -> None:
    embedder, model = make(max_queue=8, caller_share=0.5, warmup=False)
    first = await hold_compute(embedder, model)
    waiting = as_caller("tenant-a", embedder, ["a0", "a1", "a2", "a3"])
    await until(lambda: embedder.held_by("tenant-a") == 4)
    waiting.cancel()
    await asyncio.sleep(0)
    assert embedder.held_by("tenant-a") == 0 and embedder.queued == 0
    again = as_caller("tenant-a", embedder, ["a4", "a5", "a6", "a7"])  # its share is free again
    await until(lambda: embedder.held_by("tenant-a") == 4)
    model.gate.set()
    assert len(await again) == 4 and len(await first) == 1
    assert "a0" not in {t for batch in model.batches for t in batch}  # cancelled texts never ran


@pytest.mark.asyncio(loop_scope="function")
async def test_without_a_caller_texts_are_anonymous(make: Make) -> None:
    embedder, model = make(max_queue=8, caller_share=0.5, warmup=False)
    first = await hold_compute(embedder, model)
    assert current_caller.get() == ANONYMOUS
    task = asyncio.create_task(embedder.embed(["x", "y"]))
    await until(lambda: embedder.held_by(ANONYMOUS) == 2)
    model.gate.set()
    assert len(await task) == 2 and len(await first) == 1


@pytest.mark.asyncio(loop_scope="function")
async def test_close_fails_every_callers_texts(make: Make) -> None:
    embedder, model = make(max_queue=8, caller_share=0.5, warmup=False)
    first = await hold_compute(embedder, model)
    tasks = [as_caller(c, embedder, [c]) for c in ("a", "b", "c")]
    await until(lambda: embedder.queued == 3)
    await asyncio.wait_for(embedder.close(), timeout=5)
    for task in (*tasks, first):
        with pytest.raises(Exception) as failed:
            await asyncio.wait_for(task, timeout=5)
        assert failed.value.__class__.__name__ == "EmbedderClosed"
    assert embedder.queued == 0 and embedder.held_by("a") == 0
