"""GoodMem ids: the ones memproxy issues (UUIDv7), the clock they use, and the one place ids are validated.

Three kinds of id arrive from clients, each checked here only (a failure is 400 in GoodMem's wording):

* :func:`check_uuid`: a UUID, returned canonical (memory, user, key and grant ids);
* :func:`check_space_id`: a space id as stored, a UUID or a container id OpenSearch issued (looked up as
  given, not canonicalised);
* :func:`check_id`: a UUID (canonicalised) or another plain id memproxy issued (a registry alias such as
  ``all-minilm-l6-v2``, a container id), as retrieve's space keys and embedder weights name them.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from typing import Any

from proxy.errors import BadRequest
from proxy.ids import is_uuid

__all__ = ["NIL_UUID", "check_id", "check_space_id", "check_uuid", "new_id", "now_ms"]

# The owner of what has none (before system init).
NIL_UUID = "00000000-0000-0000-0000-000000000000"
# A container id: OpenSearch's own (URL-safe base64) or a client's UUID.
_SPACE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,511}$")
# Any id memproxy issues: container ids and UUIDs, and registry aliases, which may hold dots.
_PLAIN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,511}$")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_id() -> str:
    """A version-7 UUID (time-ordered, like the ids live GoodMem servers issue)."""
    ms = now_ms() & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms << 80) | (0x7 << 76) | ((rand >> 64) & 0xFFF) << 64 | (0b10 << 62) | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


def check_uuid(value: Any, field: str) -> str:
    """A canonical UUID string, or 400 'Invalid UUID format'."""
    if not isinstance(value, str):
        raise BadRequest(f"Invalid {field}: expected a UUID string")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise BadRequest(f"Invalid UUID format for {field}: {value!r}") from None


def check_space_id(value: Any) -> str:
    """A space id as given (UUID or container id); 400 otherwise."""
    if not isinstance(value, str) or not _SPACE_ID.match(value):
        raise BadRequest(f"Invalid UUID format for spaceId: {value!r}")
    return value


def check_id(value: Any, field: str) -> str:
    """A UUID (canonicalised), or another plain id memproxy itself issued; anything else is 400."""
    if not isinstance(value, str):
        raise BadRequest(f"Invalid {field}: expected a UUID string")
    if is_uuid(value):
        return str(uuid.UUID(value))
    if not _PLAIN_ID.match(value):
        raise BadRequest(f"Invalid UUID format for {field}: {value!r}")
    return value
