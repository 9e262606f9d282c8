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

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from proxy.errors import BadRequest

__all__ = [
    "DEFAULT_CHUNKING",
    "Chunk",
    "ChunkingConfig",
    "NoChunking",
    "RecursiveChunking",
    "SentenceChunking",
    "chunk_text",
    "parse_chunking",
]

DEFAULT_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", " ", "")
LengthMeasurement = Literal["CHARACTER_COUNT", "TOKEN_COUNT", "CUSTOM"]
KeepStrategy = Literal["KEEP_START", "KEEP_END", "KEEP_NONE"]
_TOKEN = re.compile(r"\w+|[^\w\s]")
# A sentence ends at terminal punctuation (optionally followed by closing quotes/brackets) before whitespace,
# or at a blank line.
_SENTENCE_END = re.compile(r"[.!?\u3002\uff01\uff1f]+[\"'\u201d\u2019)\]]*(?=\s|$)\s*|\n\s*\n\s*")


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
                    re.compile(sep)
                except re.error as exc:
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


def chunk_text(text: str, config: ChunkingConfig) -> list[Chunk]:
    """Chunk ``text`` by ``config``; offsets index ``text`` directly."""
    if config.recursive is not None:
        spans = _recursive(text, config.recursive)
    elif config.sentence is not None:
        spans = _sentences(text, config.sentence)
    else:
        spans = [(0, len(text))] if text else []
        return [Chunk(i, s, e, text[s:e]) for i, (s, e) in enumerate(spans)]
    trimmed = [t for t in (_trim(text, s, e) for s, e in spans) if t is not None]
    return [Chunk(i, s, e, text[s:e]) for i, (s, e) in enumerate(trimmed)]


def _trim(text: str, start: int, end: int) -> Span | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None


def _split(text: str, span: Span, pattern: re.Pattern[str], keep: str) -> list[Span]:
    """Cut ``span`` at every separator match; the separator stays with the piece before (KEEP_END) or
    after."""
    start, end = span
    pieces: list[Span] = []
    pos = start
    for m in pattern.finditer(text, start, end):
        if m.end() == m.start():
            continue
        cut = m.start() if keep == "KEEP_START" else m.end()
        if cut > pos:
            pieces.append((pos, cut))
            pos = cut
    if pos < end:
        pieces.append((pos, end))
    return pieces


def _hard_split(span: Span, size: int) -> list[Span]:
    start, end = span
    return [(i, min(i + size, end)) for i in range(start, end, size)]


def _split_recursive(
    text: str, span: Span, seps: list[re.Pattern[str] | None], cfg: RecursiveChunking, measure: Measure
) -> list[Span]:
    """Cut at the most preferred separator that occurs; merge the small pieces of this level, recurse into
    the big ones with the remaining separators (so chunks do not cross a stronger separator needlessly)."""
    for i, pattern in enumerate(seps):
        if pattern is None:  # the empty separator: a hard cut by characters
            return _hard_split(span, cfg.chunk_size)
        if pattern.search(text, span[0], span[1]) is not None:
            rest = seps[i + 1 :]
            break
    else:
        return _hard_split(span, cfg.chunk_size)
    out: list[Span] = []
    small: list[Span] = []
    for piece in _split(text, span, pattern, cfg.keep_strategy):
        if measure(text[piece[0] : piece[1]]) <= cfg.chunk_size:
            small.append(piece)
            continue
        if small:
            out.extend(_merge(text, small, cfg.chunk_size, cfg.chunk_overlap, measure))
            small = []
        out.extend(_split_recursive(text, piece, rest, cfg, measure))
    if small:
        out.extend(_merge(text, small, cfg.chunk_size, cfg.chunk_overlap, measure))
    return out


def _merge(text: str, pieces: list[Span], size: int, overlap: int, measure: Measure) -> list[Span]:
    """Greedy merge of contiguous pieces into chunks of at most ``size``, carrying ~``overlap`` forward."""
    chunks: list[Span] = []
    current: list[tuple[Span, int]] = []
    total = 0
    for piece in pieces:
        length = measure(text[piece[0] : piece[1]])
        if current and total + length > size:
            chunks.append((current[0][0][0], current[-1][0][1]))
            while current and (total > overlap or total + length > size):
                total -= current.pop(0)[1]
        current.append((piece, length))
        total += length
    if current:
        chunks.append((current[0][0][0], current[-1][0][1]))
    return chunks


def _recursive(text: str, cfg: RecursiveChunking) -> list[Span]:
    if not text:
        return []
    raw = cfg.separators if cfg.separators else list(DEFAULT_SEPARATORS)
    seps: list[re.Pattern[str] | None] = [
        None if s == "" else re.compile(s if cfg.separator_is_regex else re.escape(s)) for s in raw
    ]
    measure = _measure(cfg.length_measurement)
    if measure(text) <= cfg.chunk_size:
        return [(0, len(text))]
    return _split_recursive(text, (0, len(text)), seps, cfg, measure)


def _sentence_spans(text: str) -> list[Span]:
    spans: list[Span] = []
    pos = 0
    for m in _SENTENCE_END.finditer(text):
        if m.end() > pos:
            spans.append((pos, m.end()))
            pos = m.end()
    if pos < len(text):
        spans.append((pos, len(text)))
    return spans


def _sentences(text: str, cfg: SentenceChunking) -> list[Span]:
    """Whole sentences packed up to maxChunkSize; a sentence longer than that is split at spaces."""
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
    out: list[Span] = []
    cur: Span | None = None
    for sent in _sentence_spans(text):
        if measure(text[sent[0] : sent[1]]) > size:
            if cur is not None:
                out.append(cur)
                cur = None
            out.extend(_recursive_span(text, sent, long_cfg))
            continue
        if cur is not None and measure(text[cur[0] : sent[1]]) > size:
            out.append(cur)
            cur = None
        cur = sent if cur is None else (cur[0], sent[1])
    if cur is not None:
        # A short tail joins the chunk before it when that still fits.
        if (
            out
            and measure(text[cur[0] : cur[1]]) < cfg.min_chunk_size
            and measure(text[out[-1][0] : cur[1]]) <= size
        ):
            out[-1] = (out[-1][0], cur[1])
        else:
            out.append(cur)
    return out


def _recursive_span(text: str, span: Span, cfg: RecursiveChunking) -> list[Span]:
    seps: list[re.Pattern[str] | None] = [re.compile(" "), None]
    return _split_recursive(text, span, seps, cfg, _measure(cfg.length_measurement))
