"""The GoodMem wire format's plumbing: the JSON body, query parameters, the base of the request models and
their fields, and the JSON replies (one paging reply for every list).

Every query parameter is accepted in camelCase (Gen A clients) and snake_case (Gen B SDK); label filters as
``label.<key>=v`` and ``label[<key>]=v``. Request bodies are read by their camelCase names; a model that also
takes snake_case (retrieve's, as its clients send both) says so with ``snake_case_too``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

from aiohttp import web
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from proxy.api import body as body_reader
from proxy.api.goodmem.coerce import query_bool, query_int
from proxy.core.goodmem.ids import check_uuid
from proxy.core.goodmem.paging import Page
from proxy.core.goodmem.validation import LabelChange, check_labels
from proxy.errors import BadRequest

__all__ = [
    "ABSENT",
    "Query",
    "WireModel",
    "json_body",
    "label_change",
    "labels_field",
    "page_reply",
    "raw_field",
    "reply",
    "sort_descending",
    "uuid_or_none",
    "wire_field",
]

_LABEL_DOT = re.compile(r"^label\.(.+)$")
_LABEL_BRACKET = re.compile(r"^label\[(.+)\]$")


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


async def json_body(request: web.Request, *, required: bool = True) -> dict[str, Any]:
    """The request's JSON object; an empty body is ``{}`` unless ``required``."""
    try:
        body = await body_reader.read_json(request)
    except body_reader.MalformedJson as exc:
        raise BadRequest(f"Malformed JSON body: {exc.detail}") from None
    if body is None:
        if required:
            raise BadRequest("A JSON request body is required")
        return {}
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object")
    return body


class Query:
    """A request's query parameters, each by its camelCase name and also in snake_case."""

    def __init__(self, request: web.Request) -> None:
        self._query = request.query

    def text(self, name: str) -> str | None:
        for key in (name, _snake(name)):
            value = self._query.get(key)
            if value is not None:
                return value
        return None

    def flag(self, name: str, default: bool = False) -> bool:
        return query_bool(self.text(name), name, default)

    def integer(self, name: str) -> int | None:
        return query_int(self.text(name), name)

    def labels(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, value in self._query.items():
            m = _LABEL_DOT.match(key) or _LABEL_BRACKET.match(key)
            if m:
                out[m.group(1)] = value
        return out


class WireModel(BaseModel):
    """A GoodMem request body. Fields are read by their wire (alias) names, in the order they are declared,
    and each field's validator raises the ``BadRequest`` a GoodMem client sees, so pydantic's own messages
    never reach one. Unknown fields are ignored. ``to_core()`` gives the service's typed request."""

    model_config = ConfigDict(extra="ignore", frozen=True, arbitrary_types_allowed=True)
    # Also read each camelCase field from its snake_case spelling when the camelCase one is absent or null.
    snake_case_too: ClassVar[bool] = False

    @model_validator(mode="before")
    @classmethod
    def _spellings(cls, data: Any) -> Any:
        if not cls.snake_case_too or not isinstance(data, Mapping):
            return data
        out = dict(data)
        for info in cls.model_fields.values():
            camel = info.alias
            if camel and out.get(camel) is None and _snake(camel) != camel and _snake(camel) in out:
                out[camel] = out[_snake(camel)]
        return out

    @classmethod
    def parse(
        cls,
        body: Any,
        *,
        where: str = "",
        not_object: str = "The request body must be a JSON object",
        context: Mapping[str, Any] | None = None,
    ) -> Self:
        """Validate ``body``; ``where`` (the path of a nested object) and ``context`` reach the validators."""
        if not isinstance(body, Mapping):
            raise BadRequest(not_object)
        return cls.model_validate(body, context={**(context or {}), "where": where})


# --- the fields of a request model ----------------------------------------------------------------------

# A field that is absent, told apart from one sent as null.
ABSENT: Any = object()


def wire_field(alias: str, default: Any = None) -> Any:
    """A field read from ``alias``, validated even when absent (so that a required one can say so)."""
    return Field(default, alias=alias, validate_default=True)


def raw_field(alias: str, default: Any = None) -> Any:
    """A field read from ``alias`` as sent; a rule over several fields checks it."""
    return Field(default, alias=alias)


def uuid_or_none(field: str) -> BeforeValidator:
    return BeforeValidator(lambda v: check_uuid(v, field) if v is not None else None)


def labels_field(field: str = "labels", *, strict_keys: bool = False) -> BeforeValidator:
    return BeforeValidator(lambda v: check_labels(v, field, strict_keys=strict_keys))


def label_change(replace: Any, merge: Any, *, strict_keys: bool = False) -> LabelChange:
    return LabelChange.parse(replace, merge, strict_keys=strict_keys)


def sort_descending(sort_order: str | None) -> bool:
    """``sortOrder``: DESCENDING (the default) or ASCENDING."""
    order = (sort_order or "DESCENDING").upper()
    if order not in ("ASCENDING", "DESCENDING", "SORT_ORDER_UNSPECIFIED"):
        raise BadRequest("sortOrder must be ASCENDING or DESCENDING")
    return order != "ASCENDING"


def reply(body: Any, status: int = 200) -> web.Response:
    # body_reader.dumps: a lone surrogate in a stored record (one written before input was checked, or
    # straight into the node) becomes U+FFFD instead of failing the whole answer.
    return web.Response(
        status=status,
        body=body_reader.utf8(body_reader.dumps(body, separators=(",", ":"))),
        content_type="application/json",
        charset="utf-8",
    )


def page_reply(key: str, items: Sequence[Any], page: Page[Any]) -> web.Response:
    """A list reply: ``{key: items}``, plus ``nextToken`` only when another page exists."""
    body: dict[str, Any] = {key: list(items)}
    if page.next_token:
        body["nextToken"] = page.next_token
    return reply(body)
