"""How metadata is indexed for exact filtering, and the mapping fragment that holds it.

Every JSON node of a memory's metadata is flattened to its path key (``Path.key()``) and written as
``key NUL tag payload`` terms into four keyword fields under ``metadata_index``:

* ``p`` (indexed, no doc values): ``key`` for every node (exists(), IS NULL) and ``key NUL tag`` for every
  JSON type / typed view the node has (a CAST that can succeed);
* ``v``: the typed values: ``s`` string, ``n`` number in an order-preserving decimal encoding (exact for
  any precision, so range queries on the keyword compare numerically), ``N`` the same number as exact
  compact text (for the painless interpreter), ``b`` boolean, ``d`` date and ``t`` timestamp (for strings that
  parse as such), and bare markers ``z`` null, ``a`` array, ``o`` object;
* ``l`` / ``u``: ``key NUL lower(string)`` / ``key NUL upper(string)``.

Arrays are indexed under their concrete element paths ($.a[0]) and under the [*] forms ($.a[*]), so
vals()/exists() with [*] are single term queries. Four fixed fields whatever the metadata: no mapping
explosion, and keys containing dots, brackets or any Unicode are just bytes inside a term.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from decimal import Decimal
from functools import cache
from pathlib import Path as FsPath
from typing import Any

from proxy.errors import BadRequest

from .paths import MAX_KEY_BYTES, MAX_PATH_ARRAY_STEPS, STAR, Path, Segment
from .values import (
    EXACT,
    compact_number,
    json_number,
    lower_text,
    number_in_range,
    parse_date,
    parse_timestamp,
    timestamp_key,
    upper_text,
)

__all__ = [
    "FIELDS",
    "MAX_ENTRIES",
    "MAX_KEY_BYTES",
    "MAX_STRING_BYTES",
    "METADATA_INDEX_FIELD",
    "entry_key",
    "index_metadata",
    "render_metadata_mapping",
    "sortable_number",
]

METADATA_INDEX_FIELD = "metadata_index"
FIELDS = {"present": "p", "value": "v", "lower": "l", "upper": "u"}
SEP = "\x00"

# Lucene refuses terms over 32766 bytes; a string plus its key stays far below even after case mapping
# (which can grow UTF-8 by half).
MAX_STRING_BYTES = 8191
MAX_ENTRIES = 100_000

_EXP_BIAS = 500_000
_COMPLEMENT = str.maketrans("0123456789", "9876543210")


def sortable_number(value: Decimal) -> str:
    """Order-preserving text for any finite decimal: byte order of the encodings equals numeric order.

    zero is "1"; positives "2" + biased exponent + digits; negatives "0" + inverted exponent + nine's
    complement digits + "~" (so that a shorter negative mantissa sorts above a longer one with the same
    prefix: -0.5 > -0.51).
    """
    if value.is_zero():
        return "1"
    sign, digits, exp = value.normalize(EXACT).as_tuple()
    assert isinstance(exp, int)
    mantissa = "".join(map(str, digits)).rstrip("0")
    exponent = exp + len(digits)  # value = 0.mantissa * 10**exponent
    if not -_EXP_BIAS < exponent < _EXP_BIAS:
        raise OverflowError("number out of the indexable range")
    if sign == 0:
        return f"2{exponent + _EXP_BIAS:06d}{mantissa}"
    return f"0{_EXP_BIAS - exponent:06d}{mantissa.translate(_COMPLEMENT)}~"


def entry_key(key: str, tag: str, payload: str = "") -> str:
    return f"{key}{SEP}{tag}{payload}"


def _key_variants(segments: tuple[Segment, ...]) -> list[str]:
    """The keys a node is indexed under: its concrete path and every way of replacing array indexes by [*]
    (only the all-[*] form beyond MAX_PATH_ARRAY_STEPS, to bound the fan-out)."""
    positions = [i for i, s in enumerate(segments) if isinstance(s, int)]
    if not positions:
        return [Path(segments).key()]
    choices: Iterable[tuple[bool, ...]]
    if len(positions) <= MAX_PATH_ARRAY_STEPS:
        choices = itertools.product((False, True), repeat=len(positions))
    else:
        choices = [(False,) * len(positions), (True,) * len(positions)]
    keys = []
    for choice in choices:
        segs: list[Segment] = list(segments)
        for pos, star in zip(positions, choice, strict=True):
            if star:
                segs[pos] = STAR
        keys.append(Path(tuple(segs)).key())
    return keys


def _check_text(text: str, where: str) -> None:
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        raise BadRequest(f"metadata {where} contains an unpaired UTF-16 surrogate")


def index_metadata(metadata: Any) -> dict[str, list[str]]:
    """The document fragment to store under ``metadata_index`` for a memory whose metadata is ``metadata``.

    ``None`` (no metadata) indexes nothing, exactly like a document without the field. Raises BadRequest
    for metadata that cannot be indexed exactly (non-finite numbers, strings longer than
    MAX_STRING_BYTES, more than MAX_ENTRIES terms): refusing is better than a filter silently missing it.
    """
    present: set[str] = set()
    values: set[str] = set()
    lowers: set[str] = set()
    uppers: set[str] = set()
    stack: list[tuple[Any, tuple[Segment, ...]]] = [] if metadata is None else [(metadata, ())]
    while stack:
        node, segments = stack.pop()
        where = f"value at {Path(segments)}"
        tags: list[tuple[str, str]] = []  # (tag, payload) written to v
        text_forms: tuple[str, str] | None = None
        if node is None:
            tags.append(("z", ""))
        elif isinstance(node, bool):
            tags.append(("b", "1" if node else "0"))
        elif isinstance(node, (int, float, Decimal)):
            number = json_number(node)
            if number is None or not number_in_range(number):
                raise BadRequest(f"metadata {where} is not a finite JSON number in the supported range")
            tags += [("n", sortable_number(number)), ("N", compact_number(number))]
        elif isinstance(node, str):
            _check_text(node, where)
            if len(node.encode()) > MAX_STRING_BYTES:
                raise BadRequest(
                    f"metadata {where} is longer than {MAX_STRING_BYTES} bytes, the most a filterable "
                    "metadata string may hold"
                )
            tags.append(("s", node))
            date = parse_date(node)
            if date is not None:
                tags.append(("d", date.isoformat()))
            micros = parse_timestamp(node)
            if micros is not None:
                tags.append(("t", timestamp_key(micros)))
            text_forms = (lower_text(node), upper_text(node))
        elif isinstance(node, list):
            tags.append(("a", ""))
            stack.extend((child, (*segments, i)) for i, child in enumerate(node))
        elif isinstance(node, dict):
            tags.append(("o", ""))
            for name, child in node.items():
                if not isinstance(name, str):
                    raise BadRequest(f"metadata object keys must be strings (at {Path(segments)})")
                _check_text(name, f"key at {Path(segments)}")
                stack.append((child, (*segments, name)))
        else:
            raise BadRequest(f"metadata {where} is not JSON (a {type(node).__name__})")
        for key in _key_variants(segments):
            if len(key.encode()) > MAX_KEY_BYTES:
                continue  # such keys are refused in filters (typecheck), so nothing can ask for them
            present.add(key)
            for tag, payload in tags:
                values.add(entry_key(key, tag, payload))
                if tag != "N":
                    present.add(entry_key(key, tag))
            if text_forms is not None:
                lowers.add(f"{key}{SEP}{text_forms[0]}")
                uppers.add(f"{key}{SEP}{text_forms[1]}")
        if len(present) + len(values) + len(lowers) + len(uppers) > MAX_ENTRIES:
            raise BadRequest(f"metadata is too large to index for filtering (more than {MAX_ENTRIES} terms)")
    return {
        FIELDS["present"]: sorted(present),
        FIELDS["value"]: sorted(values),
        FIELDS["lower"]: sorted(lowers),
        FIELDS["upper"]: sorted(uppers),
    }


_TEMPLATE = FsPath(__file__).resolve().parents[2] / "index_templates" / "metadata_fields.json.j2"


@cache
def _rendered() -> str:
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)
    template = env.from_string(_TEMPLATE.read_text(encoding="utf-8"))
    return template.render(fields=FIELDS)


def render_metadata_mapping() -> dict[str, Any]:
    """The mapping of ``metadata_index`` (put it at ``mappings.properties.metadata_index``). It needs no
    index ``settings.analysis``: case-folded variants are computed at write time, not by a normalizer."""
    result: dict[str, Any] = json.loads(_rendered())
    return result
