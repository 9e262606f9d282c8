"""GoodMem chunking: ``none``, ``recursive`` and ``sentence`` strategies with exact character offsets.

Every chunk is a span of the memory's text: ``chunk.text == text[chunk.start:chunk.end]`` always holds
(offsets are Python string indices, i.e. Unicode code points). Leading and trailing whitespace is trimmed from
each span (the span shrinks, the invariant stays), and spans that are only whitespace are dropped.

``recursive`` follows the well-known recursive character splitter: split on the first separator (in preference
order) that occurs, recurse into pieces that are still too long with the remaining separators, then merge the
pieces greedily into chunks of at most ``chunkSize`` with about ``chunkOverlap`` of overlap. ``KEEP_END``
keeps a separator at the end of the piece before it, ``KEEP_START`` at the start of the piece after it
(``KEEP_NONE`` is deprecated and behaves as ``KEEP_END``, as documented).

Length measurement: ``CHARACTER_COUNT`` counts code points; ``TOKEN_COUNT`` counts word and punctuation tokens
(``\\w+|[^\\w\\s]``), a model-independent approximation; ``CUSTOM`` has no public definition and counts
characters.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from proxy.config import Settings
from proxy.core.longterm import LongTermMemory
from proxy.errors import BadRequest

__all__ = [
    "DEFAULT_CHUNKING",
    "DEFAULT_MAX_CHUNKS",
    "INLINE_CHUNK_CHARS",
    "REGEX_BUDGET_S",
    "Chunk",
    "ChunkingConfig",
    "NoChunking",
    "RecursiveChunking",
    "SentenceChunking",
    "chunk_documents",
    "chunk_memory",
    "chunk_text",
    "parse_chunking",
    "too_many_chunks",
]

DEFAULT_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", " ", "")
LengthMeasurement = Literal["CHARACTER_COUNT", "TOKEN_COUNT", "CUSTOM"]
KeepStrategy = Literal["KEEP_START", "KEEP_END", "KEEP_NONE"]
_TOKEN = re.compile(r"\w+|[^\w\s]")
# A sentence ends at terminal punctuation (optionally followed by closing quotes/brackets) before whitespace,
# or at a blank line.
_SENTENCE_END = re.compile(r"[.!?\u3002\uff01\uff1f]+[\"'\u201d\u2019)\]]*(?=\s|$)\s*|\n\s*\n\s*")
# The settings' default of max_chunks_per_memory, for callers that pass no bound.
DEFAULT_MAX_CHUNKS: int = Settings.max_chunks_per_memory
# Longer texts are chunked on a worker thread by chunk_memory (chunking this much takes a few milliseconds).
INLINE_CHUNK_CHARS = 20_000
# The separator regexes of one chunking get this long in all: a user pattern such as "(x+x+)+y" can backtrack
# for hours on "xxxx...". They run in the ``regex`` module, which takes a timeout and releases the GIL.
REGEX_BUDGET_S = 2.0


class _Wire(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class NoChunking(_Wire):
    pass


class RecursiveChunking(_Wire):
    chunk_size: int = Field(alias="chunkSize", gt=0)
    chunk_overlap: int = Field(0, alias="chunkOverlap", ge=0)
    separators: list[str] | None = Field(None, max_length=20)
    keep_strategy: KeepStrategy = Field("KEEP_END", alias="keepStrategy")
    separator_is_regex: bool = Field(False, alias="separatorIsRegex")
    length_measurement: LengthMeasurement = Field("CHARACTER_COUNT", alias="lengthMeasurement")

    @model_validator(mode="after")
    def _overlap_below_size(self) -> RecursiveChunking:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError("chunkOverlap must be smaller than chunkSize")
        if self.separator_is_regex:
            for sep in self.separators or ():
                try:
                    regex.compile(sep)
                except regex.error as exc:
                    raise ValueError(f"invalid separator regex {sep!r}: {exc}") from None
        return self


class SentenceChunking(_Wire):
    max_chunk_size: int = Field(alias="maxChunkSize", gt=0)
    min_chunk_size: int = Field(0, alias="minChunkSize", ge=0)
    enable_language_detection: bool = Field(False, alias="enableLanguageDetection")
    length_measurement: LengthMeasurement = Field("CHARACTER_COUNT", alias="lengthMeasurement")

    @model_validator(mode="after")
    def _min_below_max(self) -> SentenceChunking:
        if self.min_chunk_size > self.max_chunk_size:
            raise ValueError("minChunkSize must not exceed maxChunkSize")
        return self


class ChunkingConfig(_Wire):
    """GoodMem ``ChunkingConfiguration``: exactly one of ``none``, ``recursive``, ``sentence``."""

    none: NoChunking | None = None
    recursive: RecursiveChunking | None = None
    sentence: SentenceChunking | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ChunkingConfig:
        chosen = [k for k in ("none", "recursive", "sentence") if getattr(self, k) is not None]
        if len(chosen) != 1:
            raise ValueError(f"exactly one of none, recursive, sentence must be set, got {chosen or 'none'}")
        return self

    def to_json(self) -> dict[str, Any]:
        """The wire form, with every field spelled out (what the live server echoes)."""
        if self.none is not None:
            return {"none": {}}
        if self.recursive is not None:
            r = self.recursive
            return {
                "recursive": {
                    "chunkSize": r.chunk_size,
                    "chunkOverlap": r.chunk_overlap,
                    "separators": list(r.separators or []),
                    "keepStrategy": r.keep_strategy,
                    "separatorIsRegex": r.separator_is_regex,
                    "lengthMeasurement": r.length_measurement,
                }
            }
        assert self.sentence is not None
        s = self.sentence
        return {
            "sentence": {
                "maxChunkSize": s.max_chunk_size,
                "minChunkSize": s.min_chunk_size,
                "enableLanguageDetection": s.enable_language_detection,
                "lengthMeasurement": s.length_measurement,
            }
        }


# The Gen B SDK's default, also used when neither the memory nor the space says anything.
DEFAULT_CHUNKING = ChunkingConfig.model_validate(
    {
        "recursive": {
            "chunkSize": 512,
            "chunkOverlap": 64,
            "keepStrategy": "KEEP_END",
            "lengthMeasurement": "CHARACTER_COUNT",
        }
    }
)


def parse_chunking(value: Any, *, field: str = "chunkingConfig") -> ChunkingConfig:
    """Validate a wire ChunkingConfiguration; a bad one is a 400 naming the field."""
    if not isinstance(value, dict):
        raise BadRequest(f"{field} must be an object with exactly one of none, recursive, sentence")
    try:
        return ChunkingConfig.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        detail = first.get("msg", "invalid")
        raise BadRequest(f"Invalid {field}{'.' + where if where else ''}: {detail}") from None


@dataclass(frozen=True)
class Chunk:
    sequence: int
    start: int
    end: int
    text: str


Span = tuple[int, int]
Measure = Callable[[str], int]


def _measure(kind: str) -> Measure:
    if kind == "TOKEN_COUNT":
        return lambda s: len(_TOKEN.findall(s))
    return len


def _size_field(config: ChunkingConfig) -> str:
    if config.recursive is not None:
        return f"recursive.chunkSize ({config.recursive.chunk_size})"
    assert config.sentence is not None
    return f"sentence.maxChunkSize ({config.sentence.max_chunk_size})"


def too_many_chunks(config: ChunkingConfig, max_chunks: int) -> BadRequest:
    return BadRequest(
        f"The chunking configuration {json.dumps(config.to_json(), separators=(',', ':'))} cuts this memory "
        f"into more than {max_chunks} chunks, the most one memory may have (max_chunks_per_memory): use a "
        f"larger {_size_field(config)} or a shorter text"
    )


class _Deadline:
    """The time left to a chunking's separator regexes: each search is given what is left of the budget."""

    def __init__(self, seconds: float) -> None:
        self._end = time.monotonic() + seconds
        self.seconds = seconds

    def left(self) -> float:
        return max(self._end - time.monotonic(), 0.001)


def chunk_text(text: str, config: ChunkingConfig, *, max_chunks: int = DEFAULT_MAX_CHUNKS) -> list[Chunk]:
    """Chunk ``text`` by ``config``; offsets index ``text`` directly.

    A configuration that would cut the text into more than ``max_chunks`` chunks is a 400 naming it, raised
    as soon as chunk ``max_chunks + 1`` appears (the spans are produced lazily, so a ``chunkSize`` of 1
    costs no more than ``max_chunks`` chunks' work). Separator regexes get ``REGEX_BUDGET_S`` in all.
    """
    if config.recursive is None and config.sentence is None:
        spans: Iterable[Span] = [(0, len(text))] if text else []
        return [Chunk(i, s, e, text[s:e]) for i, (s, e) in enumerate(spans)]
    deadline = _Deadline(REGEX_BUDGET_S)
    if config.recursive is not None:
        spans = _recursive(text, config.recursive, deadline)
    else:
        assert config.sentence is not None
        spans = _sentences(text, config.sentence, deadline)
    chunks: list[Chunk] = []
    try:
        for start, end in spans:
            trimmed = _trim(text, start, end)
            if trimmed is None:
                continue
            if len(chunks) == max_chunks:
                raise too_many_chunks(config, max_chunks)
            chunks.append(Chunk(len(chunks), trimmed[0], trimmed[1], text[trimmed[0] : trimmed[1]]))
    except TimeoutError:
        raise BadRequest(
            f"A separator regex of the chunking configuration ran longer than {deadline.seconds:g} s on this "
            "text; use a simpler pattern"
        ) from None
    return chunks


async def chunk_memory(
    text: str, config: ChunkingConfig, *, max_chunks: int = DEFAULT_MAX_CHUNKS
) -> list[Chunk]:
    """:func:`chunk_text`, on a worker thread when the text is long enough for chunking to be felt by the
    event loop, or when a caller's separator regex may take up to ``REGEX_BUDGET_S`` (pure Python yields the
    interpreter to the loop every few milliseconds; the ``regex`` module releases it while it matches)."""
    user_regex = config.recursive is not None and config.recursive.separator_is_regex
    if config.recursive is None and config.sentence is None:
        return chunk_text(text, config, max_chunks=max_chunks)
    if len(text) <= INLINE_CHUNK_CHARS and not user_regex:
        return chunk_text(text, config, max_chunks=max_chunks)
    return await asyncio.to_thread(chunk_text, text, config, max_chunks=max_chunks)


async def chunk_documents(
    text: str,
    config: ChunkingConfig,
    *,
    memory_id: str,
    metadata: Any,
    owner_id: str,
    now: int,
    max_chunks: int,
    chunk_id: Callable[[int], str],
) -> list[LongTermMemory]:
    """A memory's text as the long-term documents that hold its chunks. ``chunk_id(sequence)`` names each:
    fresh ids for a synchronous create, ids derived from the memory for a job that may run twice."""
    return [
        LongTermMemory(
            memory=c.text,
            memory_id=memory_id,
            chunk_sequence=c.sequence,
            start_offset=c.start,
            end_offset=c.end,
            metadata=metadata,
            id=chunk_id(c.sequence),
            owner_id=owner_id,
            created_time=now,
            last_updated_time=now,
        )
        for c in await chunk_memory(text, config, max_chunks=max_chunks)
        if c.text.strip()
    ]


def _trim(text: str, start: int, end: int) -> Span | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None


def _split(text: str, span: Span, pattern: Separator, keep: str, deadline: _Deadline) -> Iterator[Span]:
    """Cut ``span`` at every separator match; the separator stays with the piece before (KEEP_END) or
    after."""
    start, end = span
    pos = start
    for m in pattern.finditer(text, start, end, deadline):
        if m.end() == m.start():
            continue
        cut = m.start() if keep == "KEEP_START" else m.end()
        if cut > pos:
            yield (pos, cut)
            pos = cut
    if pos < end:
        yield (pos, end)


def _hard_split(span: Span, size: int) -> Iterator[Span]:
    start, end = span
    return ((i, min(i + size, end)) for i in range(start, end, size))


def _split_recursive(
    text: str,
    span: Span,
    seps: list[Separator | None],
    cfg: RecursiveChunking,
    measure: Measure,
    deadline: _Deadline,
) -> Iterator[Span]:
    """Cut at the most preferred separator that occurs; merge the small pieces of this level, recurse into
    the big ones with the remaining separators (so chunks do not cross a stronger separator needlessly)."""
    for i, pattern in enumerate(seps):
        if pattern is None:  # the empty separator: a hard cut by characters
            yield from _hard_split(span, cfg.chunk_size)
            return
        if pattern.search(text, span[0], span[1], deadline) is not None:
            rest = seps[i + 1 :]
            break
    else:
        yield from _hard_split(span, cfg.chunk_size)
        return
    small: list[tuple[Span, int]] = []
    for piece in _split(text, span, pattern, cfg.keep_strategy, deadline):
        length = measure(text[piece[0] : piece[1]])
        if length <= cfg.chunk_size:
            small.append((piece, length))
            continue
        if small:
            yield from _merge(small, cfg.chunk_size, cfg.chunk_overlap)
            small = []
        yield from _split_recursive(text, piece, rest, cfg, measure, deadline)
    if small:
        yield from _merge(small, cfg.chunk_size, cfg.chunk_overlap)


def _merge(pieces: list[tuple[Span, int]], size: int, overlap: int) -> Iterator[Span]:
    """Greedy merge of contiguous measured pieces into chunks of at most ``size``, carrying ~``overlap``
    forward (a deque: dropping from the front of a long run of tiny pieces must not cost its length)."""
    current: deque[tuple[Span, int]] = deque()
    total = 0
    for piece, length in pieces:
        if current and total + length > size:
            yield (current[0][0][0], current[-1][0][1])
            while current and (total > overlap or total + length > size):
                total -= current.popleft()[1]
        current.append((piece, length))
        total += length
    if current:
        yield (current[0][0][0], current[-1][0][1])


class Separator:
    """A compiled separator: a literal one in ``re`` (a linear search, and the fastest), a caller's regex in
    ``regex`` with the chunking's time budget (``re`` offers no timeout and keeps the GIL while it works)."""

    def __init__(self, separator: str, is_regex: bool) -> None:
        self._user_regex = is_regex
        self._pattern: Any = regex.compile(separator) if is_regex else re.compile(re.escape(separator))

    def search(self, text: str, start: int, end: int, deadline: _Deadline) -> Any:
        if self._user_regex:
            return self._pattern.search(text, start, end, timeout=deadline.left())
        return self._pattern.search(text, start, end)

    def finditer(self, text: str, start: int, end: int, deadline: _Deadline) -> Iterator[Any]:
        if self._user_regex:
            return self._pattern.finditer(text, start, end, timeout=deadline.left())  # type: ignore[no-any-return]
        return self._pattern.finditer(text, start, end)  # type: ignore[no-any-return]


def _compile(separator: str, is_regex: bool) -> Separator | None:
    return None if separator == "" else Separator(separator, is_regex)


def _recursive(text: str, cfg: RecursiveChunking, deadline: _Deadline) -> Iterator[Span]:
    if not text:
        return
    raw = cfg.separators if cfg.separators else list(DEFAULT_SEPARATORS)
    seps = [_compile(s, cfg.separator_is_regex) for s in raw]
    measure = _measure(cfg.length_measurement)
    if measure(text) <= cfg.chunk_size:
        yield (0, len(text))
        return
    yield from _split_recursive(text, (0, len(text)), seps, cfg, measure, deadline)


def _sentence_spans(text: str) -> Iterator[Span]:
    pos = 0
    for m in _SENTENCE_END.finditer(text):
        if m.end() > pos:
            yield (pos, m.end())
            pos = m.end()
    if pos < len(text):
        yield (pos, len(text))


def _sentences(text: str, cfg: SentenceChunking, deadline: _Deadline) -> Iterator[Span]:
    """Whole sentences packed up to maxChunkSize; a sentence longer than that is split at spaces.

    A chunk's size is the sum of its sentences' sizes: sentences end in whitespace (or the text's end), which
    no token crosses, so the sum is what measuring the joined span would give, without re-measuring a
    growing chunk for every sentence added to it.
    """
    measure = _measure(cfg.length_measurement)
    size = cfg.max_chunk_size
    long_cfg = RecursiveChunking.model_validate(
        {
            "chunkSize": size,
            "chunkOverlap": 0,
            "separators": [" ", ""],
            "lengthMeasurement": cfg.length_measurement,
        }
    )
    long_seps: list[Separator | None] = [Separator(" ", False), None]
    held: Span | None = None  # the last chunk made, kept back: a short tail may still join it
    cur: Span | None = None
    cur_size = 0
    for sent in _sentence_spans(text):
        sent_size = measure(text[sent[0] : sent[1]])
        if sent_size > size:
            if cur is not None:
                if held is not None:
                    yield held
                held, cur = cur, None
            for piece in _split_recursive(text, sent, long_seps, long_cfg, measure, deadline):
                if held is not None:
                    yield held
                held = piece
            continue
        if cur is not None and cur_size + sent_size > size:
            if held is not None:
                yield held
            held, cur = cur, None
        if cur is None:
            cur, cur_size = sent, sent_size
        else:
            cur, cur_size = (cur[0], sent[1]), cur_size + sent_size
    if cur is not None:
        # A short tail joins the chunk before it when that still fits.
        if held is not None and cur_size < cfg.min_chunk_size and measure(text[held[0] : cur[1]]) <= size:
            held, cur = (held[0], cur[1]), None
        if held is not None:
            yield held
        held = cur
    if held is not None:
        yield held
