"""Dynamic micro-batching in front of one model, after text-embeddings-inference's queue.

Callers tokenize (on the loop for small inputs, on a helper thread for big ones; every text cut first to
what the model can read, ``LoadedModel.max_chars``), then park one item per text in their own FIFO and await
a future. One asyncio task per model owns the queues: it cuts a batch by a padded-token budget, taking one
text from each caller in turn, hands it to the shared compute thread, and delivers each vector to its caller.
The event loop only ever moves token ids and futures.

Fair share (docs/embedding.md): texts belong to the caller that ``proxy.embedding.fairness`` names when they
are submitted. One caller may hold at most ``EngineOptions.caller_limit`` texts in the queue; beyond that its
calls are refused at once (``CallerShareFull``, 429) while other callers still queue, and batches are cut
round-robin across callers, so one caller's backlog delays another's texts by at most one text per batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import cast

from proxy.embedding.config import EmbedderInfo, EngineOptions
from proxy.embedding.cpu import adapt_threads
from proxy.embedding.errors import CallerShareFull, EmbedderClosed, EmbedderOverloaded, EmbeddingFailed
from proxy.embedding.fairness import current_caller
from proxy.embedding.model import LoadedModel
from proxy.errors import BadRequest

__all__ = ["Embedder"]

log = logging.getLogger(__name__)

# Inputs at most this big are tokenized on the loop (tens of microseconds per short text); a thread hop
# would cost more than it saves. Bigger inputs go to the tokenizer thread.
_INLINE_TOKENIZE_TEXTS = 8
_INLINE_TOKENIZE_CHARS = 4096

_WARMUP_TEXTS = (
    ["memproxy warm-up"],
    [("remember this " * n).strip() for n in (2, 6, 12, 24, 48, 96)],
)


class _Request:
    """One embed() call: whose it is, its future and the vectors gathered so far."""

    __slots__ = ("caller", "future", "queued", "remaining", "vectors")

    def __init__(self, caller: str, future: asyncio.Future[list[list[float]]], size: int):
        self.caller = caller
        self.future = future
        self.vectors: list[list[float] | None] = [None] * size
        self.remaining = size
        self.queued = size  # items still waiting in the queue

    def deliver(self, index: int, vector: list[float]) -> None:
        self.vectors[index] = vector
        self.remaining -= 1
        if self.remaining == 0 and not self.future.done():
            self.future.set_result(cast(list[list[float]], self.vectors))

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class _Item:
    """One text of a request, tokenized."""

    __slots__ = ("ids", "index", "request")

    def __init__(self, request: _Request, index: int, ids: list[int]):
        self.request = request
        self.index = index
        self.ids = ids


def _compute(model: LoadedModel, batch: Sequence[_Item]) -> list[list[float] | None]:
    """Runs on the compute thread. Items whose caller gave up while the batch waited cost nothing."""
    live = [i for i, item in enumerate(batch) if not item.request.future.done()]
    results: list[list[float] | None] = [None] * len(batch)
    if live:
        adapt_threads()
        vectors = model.embed_tokens([batch[i].ids for i in live])
        for i, vector in zip(live, vectors, strict=True):
            results[i] = vector
    return results


def _as_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not a single string")
    batch = list(texts)
    for i, text in enumerate(batch):
        if not isinstance(text, str):
            raise BadRequest(f"text [{i}] to embed is a {type(text).__name__}, not a string")
    return batch


class Embedder:
    """One loaded model and its batching queue."""

    def __init__(
        self,
        info: EmbedderInfo,
        model: LoadedModel,
        options: EngineOptions,
        compute: Executor,
        tokenize: Executor,
    ):
        self.info = info
        self.model = model
        self._compute = compute
        self._tokenize_pool = tokenize
        self._max_batch_tokens = options.max_batch_tokens
        self._max_batch_size = options.batch_size_for(model.device)
        self._max_queue = options.max_queue
        self._caller_limit = options.caller_limit
        # One FIFO per caller with texts waiting, and the callers in the order their turns come.
        self._queues: dict[str, deque[_Item]] = {}
        self._turns: deque[str] = deque()
        # Texts each caller holds (reserved: being tokenized or waiting for a batch), their total, and the
        # total counted against max_queue (a caller counts for at most its limit; see _reserve).
        self._held: dict[str, int] = {}
        self._queued = 0
        self._charged = 0
        self._inflight: list[_Item] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # Plain counters for tests, health and the metrics (read at scrape time: this package stays free of
        # any metrics library): forwards handed to the model, texts and tokens it actually ran (cancelled
        # ones never count), and how many forwards ran each batch size (at most max_batch_size entries).
        self.batches_run = 0
        self.texts_computed = 0
        self.tokens_computed = 0
        self.batch_sizes: Counter[int] = Counter()

    @property
    def queued(self) -> int:
        """Texts waiting for a batch (not counting the one being computed)."""
        return self._queued

    @property
    def max_queue(self) -> int:
        return self._max_queue

    @property
    def caller_limit(self) -> int:
        """The most texts one caller may hold in the queue."""
        return self._caller_limit

    def held_by(self, caller: str) -> int:
        """Texts ``caller`` holds in the queue now."""
        return self._held.get(caller, 0)

    def start(self) -> None:
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"embedder:{self.info.id}")

    async def warmup(self) -> None:
        """First forwards pay for kernel selection and allocator growth; pay it before callers arrive."""
        for texts in _WARMUP_TEXTS:
            await self.embed(texts)

    async def embed_one(self, text: str) -> list[float]:
        return (await self.embed([text]))[0]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for ``texts``, in input order; unit length when the model normalises."""
        return (await self.embed_counted(texts))[0]

    async def embed_counted(self, texts: Sequence[str]) -> tuple[list[list[float]], list[int]]:
        """The vectors, and the tokens the model read per text (special tokens in, after truncation)."""
        batch = _as_texts(texts)
        if not batch:
            return [], []
        caller = current_caller.get()
        self._reserve(caller, len(batch))
        try:
            token_ids = await self._tokenize(batch)
            if self._closed:
                raise EmbedderClosed(f"embedder [{self.info.id}] is shut down")
        except BaseException:
            if not self._closed:  # close() has already emptied the books
                self._hold(caller, -len(batch))
            raise
        request = _Request(caller, asyncio.get_running_loop().create_future(), len(batch))
        queue = self._queues.get(caller)
        if queue is None:
            queue = self._queues[caller] = deque()
            self._turns.append(caller)
        queue.extend(_Item(request, i, ids) for i, ids in enumerate(token_ids))
        self._wake.set()
        try:
            return await request.future, [len(ids) for ids in token_ids]
        except asyncio.CancelledError:
            self._release(request)
            raise

    def _hold(self, caller: str, delta: int) -> None:
        """Changes what ``caller`` holds by ``delta`` texts, keeping the totals in step."""
        before = self._held.get(caller, 0)
        after = before + delta
        limit = self._caller_limit
        self._queued += delta
        self._charged += min(after, limit) - min(before, limit)
        if after:
            self._held[caller] = after
        else:
            del self._held[caller]

    def _reserve(self, caller: str, count: int) -> None:
        if self._closed or self._task is None:
            raise EmbedderClosed(f"embedder [{self.info.id}] is not running")
        held, limit = self._held.get(caller, 0), self._caller_limit
        # A caller that already holds texts may hold up to its limit. A call bigger than the limit is still
        # served when its caller holds nothing: it then counts as the limit against the whole queue (it may
        # not crowd the others out), so a bulk write is never refused outright, only deferred under load.
        if held > 0 and held + count > limit:
            raise CallerShareFull(
                f"embedder [{self.info.id}] is busy with this caller's texts: its share of the queue "
                f"({limit} of {self._max_queue} texts) holds {held}, {count} more refused; retry later"
            )
        charged = self._charged - min(held, limit) + min(held + count, limit)
        if charged > self._max_queue and self._charged > 0:
            raise EmbedderOverloaded(
                f"embedder [{self.info.id}] is overloaded: {self._queued} of {self._max_queue} texts "
                f"already queued, {count} more refused; retry later"
            )
        self._hold(caller, count)

    def _release(self, request: _Request) -> None:
        """Frees the queue room of a request that will not be served; its items are skipped later."""
        if request.queued:
            self._hold(request.caller, -request.queued)
        request.queued = 0

    async def _tokenize(self, texts: list[str]) -> list[list[int]]:
        # The model cuts every text to what it can read before tokenizing; the same cut decides the thread.
        limit = self.model.max_chars
        if (
            len(texts) <= _INLINE_TOKENIZE_TEXTS
            and sum(min(len(t), limit) for t in texts) <= _INLINE_TOKENIZE_CHARS
        ):
            return self.model.tokenize(texts)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._tokenize_pool, self.model.tokenize, texts)

    def _next_batch(self) -> list[_Item]:
        """One text from each caller in turn (FIFO within a caller) up to the padded-token budget; a single
        text over the budget still runs, alone."""
        batch: list[_Item] = []
        longest = 0
        while self._turns and len(batch) < self._max_batch_size:
            caller = self._turns[0]
            queue = self._queues[caller]
            while queue and queue[0].request.future.done():  # cancelled or failed: already released
                queue.popleft()
            if not queue:
                self._turns.popleft()
                del self._queues[caller]
                continue
            item = queue[0]
            width = max(longest, len(item.ids))
            if batch and width * (len(batch) + 1) > self._max_batch_tokens:
                break
            queue.popleft()
            item.request.queued -= 1
            self._hold(caller, -1)
            batch.append(item)
            longest = width
            if queue:
                self._turns.rotate(-1)  # the next text comes from the next caller
            else:
                self._turns.popleft()
                del self._queues[caller]
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._turns:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = self._next_batch()
            if not batch:
                continue
            self._inflight = batch
            try:
                vectors = await loop.run_in_executor(self._compute, _compute, self.model, batch)
            except Exception as exc:
                log.exception("embedder %s failed on a batch of %d texts", self.info.id, len(batch))
                error = EmbeddingFailed(f"embedder [{self.info.id}] failed: {type(exc).__name__}: {exc}")
                for item in batch:
                    self._release(item.request)
                    item.request.fail(error)
            else:
                ran = 0
                for item, vector in zip(batch, vectors, strict=True):
                    if vector is not None:
                        ran += 1
                        self.tokens_computed += len(item.ids)
                        item.request.deliver(item.index, vector)
                if ran:
                    self.batches_run += 1
                    self.texts_computed += ran
                    self.batch_sizes[ran] += 1
            self._inflight = []
            # One loop turn lets callers whose vectors just arrived queue their next texts, so the next
            # batch is cut from a full queue rather than from whoever was early.
            await asyncio.sleep(0)

    async def close(self) -> None:
        """Stops the batching task; every caller still waiting gets EmbedderClosed. Never waits on compute."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])  # unlike a bare await, does not swallow our own cancellation
        error = EmbedderClosed(f"embedder [{self.info.id}] shut down before the texts were embedded")
        for item in (*self._inflight, *(item for queue in self._queues.values() for item in queue)):
            item.request.queued = 0
            item.request.fail(error)
        self._queues.clear()
        self._turns.clear()
        self._held.clear()
        self._inflight = []
        self._queued = 0
        self._charged = 0
