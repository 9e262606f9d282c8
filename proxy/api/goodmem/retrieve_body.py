"""The retrieve request's POST form: the ``RetrieveMemoryRequest`` JSON body, read into the core's
:class:`RetrieveRequest`.

camelCase is the documented spelling; snake_case is accepted too (both clients' spellings are in use).
Unknown body fields are tolerated.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator

from proxy.api.goodmem.coerce import json_bool, json_int, json_number
from proxy.api.goodmem.retrieve_wire import (
    check_fetch_content,
    check_message,
    filter_text,
    parse_chat_config,
    requested_size,
)
from proxy.api.goodmem.wire import WireModel
from proxy.core.goodmem.ids import check_id
from proxy.core.goodmem.retrieve.request import (
    CHAT_POST_PROCESSOR,
    ITERATIVE_SCAN_MODES,
    ChatConfig,
    EmbedderWeight,
    HnswOptions,
    RetrieveRequest,
    SpaceKey,
    check_space_count,
)
from proxy.core.recency import recency_from
from proxy.errors import BadRequest
from proxy.store.query import Recency

__all__ = ["RetrieveBody", "parse_post_body"]


def _field(alias: str) -> Any:
    return Field(None, alias=alias, validate_default=True)


def _where(info: ValidationInfo) -> str:
    return str((info.context or {}).get("where", ""))


class _Wire(WireModel):
    snake_case_too = True


class _EmbedderWeightWire(_Wire):
    embedder_id: str = _field("embedderId")
    weight: float = _field("weight")

    @field_validator("embedder_id", mode="before")
    @classmethod
    def _id(cls, value: Any, info: ValidationInfo) -> str:
        embedder_id = check_id(value, f"{_where(info)}.embedderId")
        context = info.context or {}
        if embedder_id in context.get("seen", ()):
            raise BadRequest(f"{context['space_key']}.embedderWeights lists embedder {embedder_id} twice")
        return embedder_id

    @field_validator("weight", mode="before")
    @classmethod
    def _weight(cls, value: Any, info: ValidationInfo) -> float:
        message = f"{_where(info)}.weight must be a finite number"
        weight = json_number(value, "weight", message=message)
        if weight is None:
            raise BadRequest(message)
        return weight


def _embedder_weights(value: Any, where: str) -> tuple[EmbedderWeight, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise BadRequest(f"{where}.embedderWeights must be an array")
    out: list[EmbedderWeight] = []
    for i, entry in enumerate(value):
        what = f"{where}.embedderWeights[{i}]"
        seen = {w.embedder_id for w in out}
        wire = _EmbedderWeightWire.parse(
            entry,
            where=what,
            not_object=f"{what} must be an object",
            context={"seen": seen, "space_key": where},
        )
        out.append(EmbedderWeight(wire.embedder_id, wire.weight))
    return tuple(out)


class _SpaceKeyWire(_Wire):
    space_id: str = _field("spaceId")
    embedder_weights: tuple[EmbedderWeight, ...] | None = _field("embedderWeights")
    filter: str | None = _field("filter")

    @field_validator("space_id", mode="before")
    @classmethod
    def _space(cls, value: Any, info: ValidationInfo) -> str:
        return check_id(value, f"{_where(info)}.spaceId")

    @field_validator("embedder_weights", mode="before")
    @classmethod
    def _weights(cls, value: Any, info: ValidationInfo) -> tuple[EmbedderWeight, ...] | None:
        return _embedder_weights(value, _where(info))

    @field_validator("filter", mode="before")
    @classmethod
    def _filter(cls, value: Any, info: ValidationInfo) -> str | None:
        return filter_text(value, f"{_where(info)}.filter")


def _space_keys(value: Any) -> tuple[SpaceKey, ...]:
    if not isinstance(value, list) or not value:
        raise BadRequest("spaceKeys is required and must list at least one space")
    check_space_count(len(value), "spaceKeys")
    keys = []
    for i, entry in enumerate(value):
        where = f"spaceKeys[{i}]"
        wire = _SpaceKeyWire.parse(entry, where=where, not_object=f"{where} must be an object")
        keys.append(SpaceKey(wire.space_id, wire.embedder_weights, wire.filter))
    return tuple(keys)


class _BinaryWire(_Wire):
    content_type: str = _field("contentType")
    data: str = _field("data")

    @field_validator("content_type", mode="before")
    @classmethod
    def _type(cls, value: Any, info: ValidationInfo) -> str:
        if not isinstance(value, str) or not 1 <= len(value) <= 128:
            raise BadRequest(f"{_where(info)}.contentType must be 1..128 characters")
        return value

    @field_validator("data", mode="before")
    @classmethod
    def _data(cls, value: Any, info: ValidationInfo) -> str:
        try:
            base64.b64decode(value if isinstance(value, str) else "", validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(f"{_where(info)}.data must be base64") from None
        if not isinstance(value, str):
            raise BadRequest(f"{_where(info)}.data must be base64")
        return value


def _context(value: Any) -> tuple[tuple[str, ...], int]:
    """Text context items (embedded with the message) and the number of binary ones (reported, ignored)."""
    if value is None:
        return (), 0
    if not isinstance(value, list):
        raise BadRequest("context must be an array")
    texts: list[str] = []
    binaries = 0
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise BadRequest(f"context[{i}] must be an object")
        text, binary = item.get("text"), item.get("binary")
        if (text is None) == (binary is None):
            raise BadRequest(f"context[{i}] must hold exactly one of text or binary")
        if text is not None:
            if not isinstance(text, str):
                raise BadRequest(f"context[{i}].text must be a string")
            texts.append(text)
            continue
        _BinaryWire.parse(
            binary, where=f"context[{i}].binary", not_object=f"context[{i}].binary must be an object"
        )
        binaries += 1
    return tuple(texts), binaries


class _HnswWire(_Wire):
    ef_search: int | None = _field("efSearch")
    iterative_scan: str | None = _field("iterativeScan")
    max_scan_tuples: int | None = _field("maxScanTuples")
    scan_mem_multiplier: float | None = _field("scanMemMultiplier")

    @field_validator("ef_search", mode="before")
    @classmethod
    def _ef(cls, value: Any) -> int | None:
        ef = json_int(value, "hnsw.efSearch")
        if ef is not None and not 1 <= ef <= 1000:
            raise BadRequest("hnsw.efSearch must be between 1 and 1000")
        return ef

    @field_validator("iterative_scan", mode="before")
    @classmethod
    def _scan(cls, value: Any) -> str | None:
        if value is not None and value not in ITERATIVE_SCAN_MODES:
            raise BadRequest(f"hnsw.iterativeScan must be one of {', '.join(sorted(ITERATIVE_SCAN_MODES))}")
        return value

    @field_validator("max_scan_tuples", mode="before")
    @classmethod
    def _tuples(cls, value: Any) -> int | None:
        tuples = json_int(value, "hnsw.maxScanTuples")
        if tuples is not None and not 1 <= tuples <= 2_147_483_647:
            raise BadRequest("hnsw.maxScanTuples must be between 1 and 2147483647")
        return tuples

    @field_validator("scan_mem_multiplier", mode="before")
    @classmethod
    def _multiplier(cls, value: Any) -> float | None:
        message = "hnsw.scanMemMultiplier must be between 1.0 and 1000.0"
        mult = json_number(value, "hnsw.scanMemMultiplier", finite=False, message=message)
        if mult is not None and not 1.0 <= mult <= 1000.0:
            raise BadRequest(message)
        return mult

    def to_core(self) -> HnswOptions:
        return HnswOptions(
            self.ef_search, self.iterative_scan, self.max_scan_tuples, self.scan_mem_multiplier
        )


def _post_processor(value: Any) -> ChatConfig | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BadRequest("postProcessor must be an object")
    name = value.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 128:
        raise BadRequest("postProcessor.name must be 1..128 characters")
    if name != CHAT_POST_PROCESSOR:
        raise BadRequest(f"Unknown post-processor: {name}")
    config = value.get("config")
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise BadRequest("postProcessor.config must be an object")
    return parse_chat_config(config)


def _output_budget(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BadRequest("outputBudget must be an object")
    tokens = json_int(value.get("tokens"), "outputBudget.tokens")
    if tokens is not None and tokens <= 0:
        raise BadRequest("outputBudget.tokens must be positive")
    return tokens


def _requested_size(size: int | None) -> tuple[int, bool]:
    """The effective size, and whether the caller chose it (the post-processor's max_results default)."""
    return requested_size(size), size is not None and size > 0


def _logging(value: Any) -> None:
    """Durable request logging (Gen B): shape-checked, then accepted without effect (documented)."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise BadRequest("logging must be an object")
    attrs = value.get("callerAttributes")
    if attrs is None:
        attrs = value.get("caller_attributes")
    if attrs is not None and (not isinstance(attrs, Mapping) or len(attrs) > 32):
        raise BadRequest("logging.callerAttributes must be an object of at most 32 scalars")


def _recency(value: Any) -> Recency | None:
    """memproxy extension ``memproxyRecency: {"halfLife": "30d"}``: the opt-in recency decay. A top-level key
    GoodMem does not define, so a GoodMem client that never sends it is unaffected."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BadRequest('memproxyRecency must be an object such as {"halfLife": "30d"}')
    half_life = value.get("halfLife", value.get("half_life"))
    if half_life is None:
        raise BadRequest("memproxyRecency.halfLife is required")
    return recency_from(half_life, "memproxyRecency.halfLife")


class RetrieveBody(_Wire):
    """``RetrieveMemoryRequest``; fields are checked in this order."""

    context: Annotated[tuple[tuple[str, ...], int], BeforeValidator(_context)] = _field("context")
    fetch_memory: Annotated[bool, BeforeValidator(lambda v: json_bool(v, "fetchMemory", True))] = _field(
        "fetchMemory"
    )
    fetch_memory_content: bool = _field("fetchMemoryContent")
    logging: Annotated[None, BeforeValidator(_logging)] = _field("logging")
    message: Annotated[str, BeforeValidator(check_message)] = _field("message")
    space_keys: Annotated[tuple[SpaceKey, ...], BeforeValidator(_space_keys)] = _field("spaceKeys")
    requested_size: Annotated[
        tuple[int, bool], BeforeValidator(lambda v: _requested_size(json_int(v, "requestedSize")))
    ] = _field("requestedSize")
    hnsw: HnswOptions | None = _field("hnsw")
    chat: Annotated[ChatConfig | None, BeforeValidator(_post_processor)] = _field("postProcessor")
    output_budget: Annotated[int | None, BeforeValidator(_output_budget)] = _field("outputBudget")
    recency: Annotated[Recency | None, BeforeValidator(_recency)] = _field("memproxyRecency")

    @field_validator("fetch_memory_content", mode="before")
    @classmethod
    def _fetch_content(cls, value: Any, info: ValidationInfo) -> bool:
        return check_fetch_content(info.data["fetch_memory"], json_bool(value, "fetchMemoryContent", False))

    @field_validator("hnsw", mode="before")
    @classmethod
    def _hnsw(cls, value: Any) -> HnswOptions | None:
        if value is None:
            return None
        return _HnswWire.parse(value, not_object="hnsw must be an object").to_core()

    def to_core(self) -> RetrieveRequest:
        texts, binaries = self.context
        return RetrieveRequest(
            message=self.message,
            space_keys=self.space_keys,
            requested_size=self.requested_size[0],
            requested_size_set=self.requested_size[1],
            fetch_memory=self.fetch_memory,
            fetch_memory_content=self.fetch_memory_content,
            context_texts=texts,
            binary_context_count=binaries,
            hnsw=self.hnsw,
            chat=self.chat,
            output_budget_tokens=self.output_budget,
            recency=self.recency,
        )


def parse_post_body(body: Any) -> RetrieveRequest:
    """``RetrieveMemoryRequest``. Unknown fields are tolerated (lenient, as real clients need)."""
    return RetrieveBody.parse(body).to_core()
