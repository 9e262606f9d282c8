"""The OpenAPI description (proxy.api.openapi) of memproxy's administration routes: export and import of a
container as NDJSON (docs/cli.md gives the line format)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from proxy.api.openapi import Api, OpenSearchError, Operation, Raw

__all__ = ["ADMIN_API"]

_C = "/_memproxy/containers/{memory_container_id}"

# One JSON object per line: the container first, then its memories of every type with their vectors.
_NDJSON = {"type": "string", "description": "newline-delimited JSON, the container's line first"}


class ImportQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    create: bool | None = Field(None, description="create the container from the export's first line")


class Imported(BaseModel):
    model_config = ConfigDict(extra="allow")
    memory_container_id: str
    created: bool
    imported: int
    by_kind: dict[str, int]


ADMIN_API = Api(
    tag="memproxy admin",
    error=OpenSearchError,
    error_statuses=(400, 401, 403, 404, 409, 413, 503),
    operations={
        ("GET", _C + "/_export"): Operation(
            "Export a container with its memories and vectors (administrators)",
            {200: Raw({"application/x-ndjson": _NDJSON})},
        ),
        ("POST", _C + "/_import"): Operation(
            "Import an export into a container, all of a batch or none of it (administrators)",
            {200: Imported},
            body_other={"application/x-ndjson": _NDJSON},
            query=ImportQuery,
        ),
    },
)
