"""An independent oracle for the GoodMem filter language: the filter text translated to PostgreSQL over a
``jsonb`` column, evaluated by a real PostgreSQL (GoodMem itself evaluates its filters in PostgreSQL).

Nothing here comes from ``proxy.filters``: the tokenizer, the parser, the typing rules and the SQL are
written from the language's documentation (``docs/filters.md``, spec ``goodmem-api.md`` §7), so a bug in
the shared parser, type checker or value semantics of the compiler and the reference evaluator shows up as
a disagreement with PostgreSQL.

The division of labour, and where PostgreSQL is *not* the judge:

* PostgreSQL computes the values: JSON paths (``jsonb_path_query`` in strict mode), exact ``numeric``
  arithmetic and comparison, ``round`` (INTEGER casts), ``trim_scale`` (number text), date and timestamp
  input, calendars, time zones and ``EXTRACT``, ``date`` arithmetic, text order (``C`` collation: code point
  order), ``lower``/``upper``/``ILIKE`` (glibc's ``C.UTF-8`` tables), ``LIKE``, ``IN`` lists, three-valued
  ``AND``/``OR``/``NOT``, ``jsonb`` equality of collection elements.
* Where memproxy documents a rule that *replaces* an error or a limit of PostgreSQL, the SQL states that rule
  with small helper functions (``PRELUDE``) built on PostgreSQL's exact arithmetic: division or ``%`` by
  zero, numeric overflow beyond a decimal exponent of +-5000, an invalid computed LIKE pattern and a date
  outside 0001-9999 are NULL instead of an error; INTEGER has no int4/int8 range (it is ``numeric`` rounded
  to scale 0); a CAST of a stored value whose JSON type does not fit is NULL; ``CURRENT_DATE`` and
  ``CURRENT_TIMESTAMP`` are the test's fixed ``now``; a stored string reads as a date only in the documented
  ISO 8601 shape (PostgreSQL's date input would also take ``'today'`` or ``'Jan 1 2024'``); and NUMERIC
  ``/`` is rounded to 34 significant digits half-even (PostgreSQL rounds a quotient to at least 16
  significant digits, half away from zero; the rule is applied with ``div``/``mod`` on exact integers).
* Where PostgreSQL's own result differs from the documented one, the construct is excluded from the
  comparison, never silently: ``exclusion()`` names the reason for each excluded (filter, document) pair and
  the test prints the counts. See ``EXCLUSIONS``.

The translation reads only what the generated filters of ``tests/test_filters_differential.py`` use plus the
documented forms around them; anything else raises ``Unsupported`` (a test failure, not an exclusion).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from typing import Any

# --- exclusions -------------------------------------------------------------------------------------------
EXCLUSIONS = {
    "nul": "the document holds U+0000 in a string or key: jsonb (and PostgreSQL text) cannot store it",
    "case-mapping": (
        "lower()/upper()/ILIKE over a code point whose PostgreSQL (glibc C.UTF-8) mapping differs from the "
        "documented one: memproxy leaves a code point whose full mapping expands unchanged, glibc applies "
        "Unicode's simple mapping (27 Greek letters with ypogegrammeni under upper(), e.g. U+1FB3 -> U+1FBC)"
    ),
    "datetime-input": (
        "the document holds a string in ISO 8601 shape that PostgreSQL's date/time input reads differently "
        "from the documented rules (24:00:00 or a leap second 60 accepted, a fraction beyond microseconds "
        "rounded instead of truncated, a zone offset beyond +-15:59 rejected) and the filter reads stored "
        "strings as dates or timestamps"
    ),
}

ISO_SHAPE = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"([Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?([Zz]|[+-][0-9]{2}(:?[0-9]{2})?)?)?$"
)
_ISO_RE = re.compile(ISO_SHAPE)
_ISO_PARTS = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[Tt ]([0-9]{2}):[0-9]{2}(?::([0-9]{2})(?:\.([0-9]+))?)?"
    r"(?:[Zz]|[+-]([0-9]{2})(?::?([0-9]{2}))?)?)?"
)


def _datetime_input_differs(text: str) -> bool:
    """A string of the documented shape on which PostgreSQL's input and the documented rules part ways."""
    m = _ISO_PARTS.fullmatch(text)
    if not m or not _ISO_RE.match(text):
        return False
    hour, second, fraction, zone_h, zone_m = m.groups()
    return (
        (hour is not None and int(hour) >= 24)
        or (second is not None and int(second) >= 60)
        or (fraction is not None and len(fraction) > 6)
        or (zone_h is not None and int(zone_h) * 60 + int(zone_m or 0) > 15 * 60 + 59)
    )


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    return []


def jsonb_storable(doc: Any) -> bool:
    return not any("\x00" in s for s in _strings(doc))


def documented_lower(c: str) -> str:
    """docs/filters.md: per code point; a mapping that expands leaves the code point unchanged; İ -> i."""
    if c == "\u0130":
        return "i"
    mapped = c.lower()
    return mapped if len(mapped) == 1 else c


def documented_upper(c: str) -> str:
    mapped = c.upper()
    return mapped if len(mapped) == 1 else c


def case_divergence(conn: Any) -> frozenset[str]:
    """Code points whose lower() or upper() in this PostgreSQL differs from the documented mapping."""
    cased_in_pg = {
        chr(i)
        for (i,) in conn.execute(
            "SELECT i FROM generate_series(1, 1114111) AS i WHERE i NOT BETWEEN 55296 AND 57343 "
            "AND (lower(chr(i)) <> chr(i) OR upper(chr(i)) <> chr(i))"
        ).fetchall()
    }
    cased_in_docs = {
        c
        for c in map(chr, range(1, 0x110000))
        if not 0xD800 <= ord(c) <= 0xDFFF and (documented_lower(c) != c or documented_upper(c) != c)
    }
    candidates = sorted(cased_in_pg | cased_in_docs)
    rows = conn.execute("SELECT c, lower(c), upper(c) FROM unnest(%s::text[]) AS c", [candidates]).fetchall()
    return frozenset(c for c, lo, up in rows if lo != documented_lower(c) or up != documented_upper(c))


@dataclass
class Translation:
    sql: str
    features: set[str] = field(default_factory=set)  # "case", "stored-dates"
    text: str = ""


def exclusion(tr: Translation, doc: Any, divergent: frozenset[str]) -> str | None:
    """Why this (filter, document) pair is left out of the PostgreSQL comparison, or None."""
    strings = _strings(doc)
    if not jsonb_storable(doc):
        return "nul"
    if "case" in tr.features and any(c in divergent for s in [*strings, tr.text] for c in s):
        return "case-mapping"
    if "stored-dates" in tr.features and any(_datetime_input_differs(s) for s in strings):
        return "datetime-input"
    return None


# --- helper functions (rules that replace PostgreSQL errors or limits; see the module docstring) ------------
PRELUDE = r"""
CREATE OR REPLACE FUNCTION mp_bound(x numeric) RETURNS numeric LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN x = 0 THEN x WHEN abs(x) >= 1e5001 OR abs(x) < 1e-5000 THEN NULL ELSE x END $$;

CREATE OR REPLACE FUNCTION mp_exp10(x numeric) RETURNS int LANGUAGE sql IMMUTABLE AS $$
  -- decimal exponent of a positive number: floor(log10(x)), read exactly from its digits
  SELECT CASE WHEN x >= 1 THEN length(split_part(trim_scale(x)::text, '.', 1)) - 1
    ELSE -(length(split_part(trim_scale(x)::text, '.', 2))
           - length(ltrim(split_part(trim_scale(x)::text, '.', 2), '0'))) - 1 END $$;

CREATE OR REPLACE FUNCTION mp_div(a numeric, b numeric) RETURNS numeric LANGUAGE plpgsql IMMUTABLE AS $$
-- a / b rounded to 34 significant digits, ties to even (the documented rule), NULL for b = 0
DECLARE
  k int; num numeric; den numeric; q numeric; r numeric; d int; p numeric; t numeric; res numeric;
BEGIN
  IF a IS NULL OR b IS NULL OR b = 0 THEN RETURN NULL; END IF;
  IF a = 0 THEN RETURN 0; END IF;
  k := 35 - mp_exp10(abs(a)) + mp_exp10(abs(b));  -- so that the integer quotient has 35 or 36 digits
  num := abs(a); den := abs(b);
  IF k >= 0 THEN num := num * power(10::numeric, k); ELSE den := den * power(10::numeric, -k); END IF;
  q := div(num, den);
  r := num - q * den;
  d := length(trim_scale(q)::text) - 34;
  p := power(10::numeric, d);
  t := mod(q, p);
  q := div(q, p);
  IF t * 2 > p OR (t * 2 = p AND (r > 0 OR mod(q, 2) = 1)) THEN q := q + 1; END IF;
  res := (trim_scale(q)::text || 'e' || (d - k)::text)::numeric;
  RETURN mp_bound(sign(a) * sign(b) * res);
END $$;

CREATE OR REPLACE FUNCTION mp_date(t text) RETURNS date LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF t IS NULL OR t !~ '__ISO_SHAPE__' THEN RETURN NULL; END IF;
  RETURN t::date;
EXCEPTION WHEN others THEN RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION mp_ts(t text) RETURNS timestamptz LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE v timestamptz;
BEGIN
  IF t IS NULL OR t !~ '__ISO_SHAPE__' THEN RETURN NULL; END IF;
  v := t::timestamptz;  -- the session's TimeZone is UTC: no zone means UTC
  IF v < '0001-01-01 00:00:00+00' OR v >= '10000-01-01 00:00:00+00' THEN RETURN NULL; END IF;
  RETURN v;
EXCEPTION WHEN others THEN RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION mp_date_add(d date, n numeric) RETURNS date LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE day numeric;
BEGIN
  day := (d - date '0001-01-01') + n;  -- stays within 0001-01-01 .. 9999-12-31, or NULL
  IF day IS NULL OR day < 0 OR day > date '9999-12-31' - date '0001-01-01' THEN RETURN NULL; END IF;
  RETURN date '0001-01-01' + day::int;
END $$;

-- A computed pattern that ends with a lone escape is NULL. PostgreSQL raises only when its matcher reaches
-- that escape ('a' LIKE 'a\' is false, 'ab' LIKE 'a\' an error), so the pattern is checked up front.
CREATE OR REPLACE FUNCTION mp_like(s text, p text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN p ~ '(^|[^\\])(\\\\)*\\$' THEN NULL ELSE s LIKE p END $$;

CREATE OR REPLACE FUNCTION mp_ilike(s text, p text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN p ~ '(^|[^\\])(\\\\)*\\$' THEN NULL ELSE s ILIKE p END $$;

-- val(): JSON null is SQL NULL
CREATE OR REPLACE FUNCTION mp_val(m jsonb, p jsonpath) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT NULLIF(jsonb_path_query_first(m, p), 'null'::jsonb) $$;

-- vals(): every selected node; a selected array contributes its elements (one level)
CREATE OR REPLACE FUNCTION mp_vals(m jsonb, p jsonpath) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(jsonb_agg(u.e), '[]'::jsonb)
  FROM jsonb_path_query(m, p) AS q(x),
       LATERAL (SELECT q.x WHERE jsonb_typeof(q.x) <> 'array'
                UNION ALL
                SELECT y FROM jsonb_array_elements(CASE WHEN jsonb_typeof(q.x) = 'array' THEN q.x END) AS a(y)
               ) AS u(e) $$;

CREATE OR REPLACE FUNCTION mp_as_array(v jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN jsonb_typeof(v) = 'array' THEN v END $$;

CREATE OR REPLACE FUNCTION mp_json_text(v jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN jsonb_typeof(v) = 'string' THEN v #>> '{}' END $$;
CREATE OR REPLACE FUNCTION mp_json_num(v jsonb) RETURNS numeric LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN jsonb_typeof(v) = 'number' THEN v::numeric END $$;
CREATE OR REPLACE FUNCTION mp_json_bool(v jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN jsonb_typeof(v) = 'boolean' THEN v::boolean END $$;

-- collection elements are equal when they are the same JSON scalar (objects and arrays never are)
CREATE OR REPLACE FUNCTION mp_elem_eq(a jsonb, b jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_typeof(a) IN ('string', 'number', 'boolean', 'null') AND jsonb_typeof(a) = jsonb_typeof(b)
         AND a = b $$;

CREATE OR REPLACE FUNCTION mp_contains(a jsonb, b jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN a IS NULL OR b IS NULL THEN NULL ELSE NOT EXISTS (
    SELECT 1 FROM jsonb_array_elements(b) AS y(v)
    WHERE NOT EXISTS (SELECT 1 FROM jsonb_array_elements(a) AS x(v) WHERE mp_elem_eq(x.v, y.v))) END $$;

CREATE OR REPLACE FUNCTION mp_overlaps(a jsonb, b jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN a IS NULL OR b IS NULL THEN NULL ELSE EXISTS (
    SELECT 1 FROM jsonb_array_elements(a) AS x(v), jsonb_array_elements(b) AS y(v)
    WHERE mp_elem_eq(x.v, y.v)) END $$;

-- x IN <collection>, per type of x: a TEXT matches a JSON string, a number a JSON number, a BOOLEAN a JSON
-- boolean, a DATE/TIMESTAMP a string that reads as one
CREATE OR REPLACE FUNCTION mp_in_text(x text, c jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN x IS NULL OR c IS NULL THEN NULL ELSE EXISTS (
    SELECT 1 FROM jsonb_array_elements(c) AS e(v) WHERE mp_json_text(e.v) = x) END $$;
CREATE OR REPLACE FUNCTION mp_in_num(x numeric, c jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN x IS NULL OR c IS NULL THEN NULL ELSE EXISTS (
    SELECT 1 FROM jsonb_array_elements(c) AS e(v) WHERE mp_json_num(e.v) = x) END $$;
CREATE OR REPLACE FUNCTION mp_in_bool(x boolean, c jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN x IS NULL OR c IS NULL THEN NULL ELSE EXISTS (
    SELECT 1 FROM jsonb_array_elements(c) AS e(v) WHERE mp_json_bool(e.v) = x) END $$;
CREATE OR REPLACE FUNCTION mp_in_date(x date, c jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN x IS NULL OR c IS NULL THEN NULL ELSE EXISTS (
    SELECT 1 FROM jsonb_array_elements(c) AS e(v) WHERE mp_date(mp_json_text(e.v)) = x) END $$;
CREATE OR REPLACE FUNCTION mp_in_ts(x timestamptz, c jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN x IS NULL OR c IS NULL THEN NULL ELSE EXISTS (
    SELECT 1 FROM jsonb_array_elements(c) AS e(v) WHERE mp_ts(mp_json_text(e.v)) = x) END $$;
""".replace("__ISO_SHAPE__", ISO_SHAPE)


# --- tokenizer ---------------------------------------------------------------------------------------------
class Unsupported(Exception):
    """A construct this translator does not cover (a test failure: the generator moved on)."""


KEYWORDS = {
    "or", "and", "not", "like", "ilike", "is", "in", "null", "true", "false", "contains", "overlaps", "cast",
    "as", "extract", "from", "current_date", "current_timestamp",
}  # fmt: skip

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r\n\f]+|--[^\n]*)
  | (?P<number>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
  | (?P<string>'(?:[^'\\\x00-\x1f\x7f]|\\[^\x00-\x1f\x7f]|'')*')
  | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>==|!=|<>|<=|>=|\|\||[=<>+\-*/%(),\[\]])
    """,
    re.VERBOSE,
)
_ESCAPES = {"'": "'", "\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}


def decode_string(token: str) -> str:
    """'...' -> its value: '' is a quote; \\' \\\\ \\" \\n \\r \\t \\b \\f are decoded, any other backslash
    pair is kept as written."""
    body, out, i = token[1:-1], [], 0
    while i < len(body):
        c = body[i]
        if c == "'":  # the lexer only lets a quote through doubled
            out.append("'")
            i += 2
        elif c == "\\":
            nxt = body[i + 1]
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


@dataclass
class Tok:
    kind: str  # number string word kw op end
    text: str


def tokenize(text: str) -> list[Tok]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise Unsupported(f"cannot tokenize at {pos}: {text[pos : pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup or ""
        if kind == "ws":
            continue
        value = m.group()
        if kind == "word" and value.lower() in KEYWORDS:
            out.append(Tok("kw", value.lower()))
        else:
            out.append(Tok(kind, value))
    out.append(Tok("end", ""))
    return out


# --- parser: tuples (kind, ...) ---------------------------------------------------------------------------
Node = tuple[Any, ...]
COMPARISONS = {"=", "==", "!=", "<>", "<", "<=", ">", ">="}


class Parser:
    def __init__(self, text: str) -> None:
        self.toks = tokenize(text)
        self.i = 0

    def peek(self, ahead: int = 0) -> Tok:
        return self.toks[min(self.i + ahead, len(self.toks) - 1)]

    def at(self, kind: str, text: str | None = None, ahead: int = 0) -> bool:
        t = self.peek(ahead)
        return t.kind == kind and (text is None or t.text == text)

    def take(self, kind: str, text: str | None = None) -> Tok:
        if not self.at(kind, text):
            raise Unsupported(f"expected {text or kind}, got {self.peek().text!r}")
        self.i += 1
        return self.toks[self.i - 1]

    def parse(self) -> Node:
        node = self.or_expr()
        self.take("end")
        return node

    def or_expr(self) -> Node:
        items = [self.and_expr()]
        while self.at("kw", "or"):
            self.i += 1
            items.append(self.and_expr())
        return items[0] if len(items) == 1 else ("or", items)

    def and_expr(self) -> Node:
        items = [self.not_expr()]
        while self.at("kw", "and"):
            self.i += 1
            items.append(self.not_expr())
        return items[0] if len(items) == 1 else ("and", items)

    def not_expr(self) -> Node:
        if self.at("kw", "not"):
            self.i += 1
            return ("not", self.not_expr())
        return self.predicate()

    def predicate(self) -> Node:
        left = self.concat()
        t = self.peek()
        if t.kind == "op" and t.text in COMPARISONS:
            self.i += 1
            return ("cmp", {"==": "=", "!=": "<>"}.get(t.text, t.text), left, self.concat())
        negated = False
        if (
            self.at("kw", "not")
            and self.peek(1).kind == "kw"
            and self.peek(1).text in {"like", "ilike", "in"}
        ):
            negated = True
            self.i += 1
        if self.at("kw", "like") or self.at("kw", "ilike"):
            word = self.take("kw").text
            node: Node = ("like", word == "ilike", left, self.concat())
            return ("not", node) if negated else node
        if self.at("kw", "in"):
            self.i += 1
            if self.at("op", "("):
                self.i += 1
                items = self.arg_list()
                self.take("op", ")")
                node = ("in_list", left, items)
            else:
                node = ("in_coll", left, self.postfix(parens=False))
            return ("not", node) if negated else node
        if negated:
            raise Unsupported("NOT without LIKE/ILIKE/IN")
        if self.at("kw", "is"):
            self.i += 1
            neg = self.at("kw", "not")
            if neg:
                self.i += 1
            self.take("kw", "null")
            return ("not", ("isnull", left)) if neg else ("isnull", left)
        if self.at("kw", "contains") or self.at("kw", "overlaps"):
            word = self.take("kw").text
            return (word, left, self.concat())
        return left

    def concat(self) -> Node:
        node = self.additive()
        while self.at("op", "||"):
            self.i += 1
            node = ("||", node, self.additive())
        return node

    def additive(self) -> Node:
        node = self.multiplicative()
        while self.at("op", "+") or self.at("op", "-"):
            op = self.take("op").text
            node = (op, node, self.multiplicative())
        return node

    def multiplicative(self) -> Node:
        node = self.unary()
        while self.at("op", "*") or self.at("op", "/") or self.at("op", "%"):
            op = self.take("op").text
            node = (op, node, self.unary())
        return node

    def unary(self) -> Node:
        if self.at("op", "-") or self.at("op", "+"):
            op = self.take("op").text
            inner = self.unary()
            return ("neg", inner) if op == "-" else inner
        return self.postfix(parens=True)

    def postfix(self, parens: bool) -> Node:
        node: Node
        if parens and self.at("op", "("):
            self.i += 1
            node = ("paren", self.or_expr())
            self.take("op", ")")
        else:
            node = self.atom()
        while self.at("op", "["):
            self.i += 1
            index = self.or_expr()
            self.take("op", "]")
            node = ("subscript", node, index)
        return node

    def arg_list(self) -> list[Node]:
        items = [self.or_expr()]
        while self.at("op", ","):
            self.i += 1
            items.append(self.or_expr())
        return items

    def atom(self) -> Node:
        t = self.peek()
        self.i += 1
        if t.kind == "number":
            return ("number", t.text)
        if t.kind == "string":
            return ("string", decode_string(t.text))
        if t.kind == "kw" and t.text in ("true", "false"):
            return ("bool", t.text == "true")
        if t.kind == "kw" and t.text == "null":
            return ("null",)
        if t.kind == "kw" and t.text in ("current_date", "current_timestamp"):
            return (t.text,)
        if t.kind == "kw" and t.text == "cast":
            self.take("op", "(")
            inner = self.or_expr()
            self.take("kw", "as")
            name = self.take("word").text.upper()
            self.take("op", ")")
            return ("cast", inner, name)
        if t.kind == "kw" and t.text == "extract":
            self.take("op", "(")
            unit = self.take("word").text.upper()
            self.take("kw", "from")
            inner = self.or_expr()
            self.take("op", ")")
            return ("extract", unit, inner)
        if t.kind == "word" and self.at("op", "("):
            self.i += 1
            args = [] if self.at("op", ")") else self.arg_list()
            self.take("op", ")")
            return ("call", t.text.lower(), args)
        if t.kind == "op" and t.text == "[":
            items = [] if self.at("op", "]") else self.arg_list()
            self.take("op", "]")
            return ("array", items)
        raise Unsupported(f"unexpected token {t.text!r}")


# --- JSON paths -> strict jsonpath that selects nothing (instead of raising) on a structural mismatch -------
def parse_path(path: str) -> list[tuple[str, Any]]:
    """'$.a."b c"[0][*]["d"]' -> [("key", "a"), ("key", "b c"), ("index", 0), ("all", None), ("key", "d")]."""
    if not path.startswith("$"):
        raise Unsupported(f"path {path!r}")
    steps: list[tuple[str, Any]] = []
    i = 1
    decoder = json.JSONDecoder()
    while i < len(path):
        c = path[i]
        if c == "." and path[i + 1 : i + 2] == '"':
            name, end = decoder.raw_decode(path, i + 1)
            steps.append(("key", name))
            i = end
        elif c == ".":
            j = i + 1
            while j < len(path) and (path[j].isalnum() or path[j] == "_"):
                j += 1
            if j == i + 1:
                raise Unsupported(f"path {path!r}")
            steps.append(("key", path[i + 1 : j]))
            i = j
        elif path.startswith("[*]", i):
            steps.append(("all", None))
            i += 3
        elif c == "[" and path[i + 1 : i + 2] == '"':
            name, end = decoder.raw_decode(path, i + 1)
            if path[end : end + 1] != "]":
                raise Unsupported(f"path {path!r}")
            steps.append(("key", name))
            i = end + 1
        elif c == "[" and path[i + 1 : i + 2] == "'":
            m = re.compile(r"'((?:[^'\\]|\\.)*)'\]").match(path, i + 1)
            if m is None:
                raise Unsupported(f"path {path!r}")
            body = m.group(1).replace('"', '\\"').replace("\\'", "'")
            steps.append(("key", json.loads(f'"{body}"')))
            i = m.end()
        else:
            m = re.compile(r"\[([0-9]+)\]").match(path, i)
            if m is None:
                raise Unsupported(f"path {path!r}")
            steps.append(("index", int(m.group(1))))
            i = m.end()
    return steps


def _jsonpath_string(name: str) -> str:
    out = ['"']
    for c in name:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out) + '"'


def jsonpath(steps: list[tuple[str, Any]]) -> str:
    """Strict mode (no automatic unwrapping of arrays, no scalar-as-array), each step behind a filter so that
    a missing key, an index past the end or a step on the wrong JSON type selects nothing (strict mode would
    raise)."""
    out = ["strict $"]
    for kind, arg in steps:
        if kind == "key":
            key = _jsonpath_string(arg)
            out.append(f" ? (exists(@.{key})).{key}")
        elif kind == "index":
            out.append(f" ? (exists(@[{arg}]))[{arg}]")
        else:
            out.append(' ? (@.type() == "array")[*]')
    return "".join(out)


# --- translation -----------------------------------------------------------------------------------------
PG_TYPES = {
    "text": "text", "numeric": "numeric", "integer": "numeric", "boolean": "boolean", "date": "date",
    "timestamp": "timestamptz",
}  # fmt: skip
CAST_NAMES = {
    "TEXT": "text", "VARCHAR": "text", "NUMERIC": "numeric", "DECIMAL": "numeric", "INTEGER": "integer",
    "INT": "integer", "BIGINT": "integer", "BOOLEAN": "boolean", "BOOL": "boolean", "DATE": "date",
    "TIMESTAMP": "timestamp", "TIMESTAMPTZ": "timestamp",
}  # fmt: skip
EXTRACT_UNITS = {"YEAR", "QUARTER", "MONTH", "DAY", "DOW", "ISODOW", "DOY", "EPOCH", "HOUR", "MINUTE",
                 "SECOND"}  # fmt: skip
NUMERIC_TYPES = {"numeric", "integer"}


def sql_literal(value: str) -> str:
    if "\x00" in value:
        raise Unsupported("NUL in a literal")
    return "'" + value.replace("'", "''") + "'"


@dataclass
class E:
    """A translated expression: SQL text and type (text numeric integer boolean date timestamp; json for
    val(), coll for a collection, unknown for a string literal typed by its context, null for NULL)."""

    sql: str
    type: str
    lit: str | None = None  # the value of a string literal
    const: bool = False  # built from literals only


class Translator:
    def __init__(self, now: dt.datetime) -> None:
        now = now.astimezone(dt.UTC)
        self.today = f"CAST('{now.date().isoformat()}' AS date)"
        self.now = f"CAST('{now.isoformat()}' AS timestamptz)"
        self.features: set[str] = set()

    # -- coercions
    def to(self, e: E, t: str) -> str:
        if e.type == t or (e.type == "integer" and t == "numeric"):
            return e.sql
        if e.type == "null":
            return f"CAST(NULL AS {PG_TYPES[t]})"
        if e.type in ("unknown", "text"):
            src = e.sql if e.type == "text" else f"CAST({e.sql} AS text)"
            if t == "text":
                return src
            if not e.const:
                if t in ("date", "timestamp"):
                    self.features.add("stored-dates")
                else:
                    raise Unsupported(f"computed TEXT to {t}")
            if t == "date":
                return f"mp_date({src})"
            if t == "timestamp":
                return f"mp_ts({src})"
            return f"CAST({src} AS {PG_TYPES[t]})"
        if e.type == "date" and t == "timestamp":
            return f"CAST({e.sql} AS timestamptz)"
        raise Unsupported(f"no implicit {e.type} -> {t}")

    def text_of(self, e: E) -> str:
        """CAST(x AS TEXT): plain numbers without trailing zeros, true/false, ISO dates, UTC timestamps."""
        if e.type in ("text", "unknown", "null"):
            return self.to(e, "text")
        if e.type in NUMERIC_TYPES:
            return f"CAST(trim_scale({e.sql}) AS text)"
        if e.type == "boolean":
            return f"CAST({e.sql} AS text)"
        if e.type == "date":
            return f"CAST({e.sql} AS text)"
        if e.type == "timestamp":
            return f"CAST(({e.sql}) AT TIME ZONE 'UTC' AS text)"
        raise Unsupported(f"{e.type} as text")

    @staticmethod
    def unify(a: str, b: str) -> str:
        """The common type of two operands; "unknown" (string literals only) and "null" stay open until a
        typed operand decides, and a caller reads a still-open result as TEXT."""
        if a == "null":
            return b
        if b == "null":
            return a
        if a == "unknown":
            return b
        if b == "unknown":
            return a
        if a in NUMERIC_TYPES and b in NUMERIC_TYPES:
            return "integer" if a == b == "integer" else "numeric"
        if {a, b} == {"date", "timestamp"}:
            return "timestamp"
        if a == b and a in PG_TYPES:
            return a
        raise Unsupported(f"cannot compare {a} with {b}")

    def coll(self, e: E) -> str:
        if e.type == "coll":
            return e.sql
        if e.type == "json":
            return f"mp_as_array({e.sql})"
        raise Unsupported(f"{e.type} as a collection")

    def member(self, x: E, coll_sql: str) -> str:
        t = {"unknown": "text", "integer": "numeric"}.get(x.type, x.type)
        if t == "null":
            return "CAST(NULL AS boolean)"
        if t in ("date", "timestamp"):
            self.features.add("stored-dates")
        fn = {"text": "mp_in_text", "numeric": "mp_in_num", "boolean": "mp_in_bool", "date": "mp_in_date",
              "timestamp": "mp_in_ts"}.get(t)  # fmt: skip
        if fn is None:
            raise Unsupported(f"{x.type} IN a collection")
        return f"{fn}({self.to(x, t)}, {coll_sql})"

    def json_item(self, e: E) -> str:
        """An array literal's item as a jsonb value."""
        if e.type == "null":
            return "'null'::jsonb"
        if e.type in ("unknown", "text"):
            return f"to_jsonb({self.to(e, 'text')})"
        if e.type in NUMERIC_TYPES:
            return f"to_jsonb({e.sql})"
        if e.type == "boolean":
            return f"to_jsonb({e.sql})"
        raise Unsupported(f"{e.type} in an array literal")

    # -- the walk
    def boolean(self, node: Node) -> str:
        e = self.emit(node)
        if e.type == "null":
            return "CAST(NULL AS boolean)"
        if e.type != "boolean":
            raise Unsupported(f"{e.type} where a BOOLEAN is needed")
        return e.sql

    def emit(self, node: Node) -> E:
        kind = node[0]
        if kind == "paren":
            return self.emit(node[1])
        if kind == "number":
            text = node[1]
            integral = not any(c in text for c in ".eE")
            return E(f"CAST('{text}' AS numeric)", "integer" if integral else "numeric", const=True)
        if kind == "string":
            return E(sql_literal(node[1]), "unknown", lit=node[1], const=True)
        if kind == "bool":
            return E("TRUE" if node[1] else "FALSE", "boolean", const=True)
        if kind == "null":
            return E("NULL", "null", const=True)
        if kind == "current_date":
            return E(self.today, "date", const=True)
        if kind == "current_timestamp":
            return E(self.now, "timestamp", const=True)
        if kind in ("and", "or"):
            return E("(" + f" {kind.upper()} ".join(self.boolean(n) for n in node[1]) + ")", "boolean")
        if kind == "not":
            return E(f"(NOT {self.boolean(node[1])})", "boolean")
        if kind == "cmp":
            return self.compare(node[1], self.emit(node[2]), self.emit(node[3]))
        if kind == "like":
            return self.like(node[1], self.emit(node[2]), self.emit(node[3]))
        if kind == "isnull":
            e = self.emit(node[1])  # a collection (vals(), [...]) is never NULL, even when empty
            return E(f"({e.sql} IS NULL)", "boolean")
        if kind == "in_list":
            return self.in_list(self.emit(node[1]), [self.emit(n) for n in node[2]])
        if kind == "in_coll":
            x, c = self.emit(node[1]), self.emit(node[2])
            return E(self.member(x, self.coll(c)), "boolean")
        if kind == "contains":
            a, b = self.emit(node[1]), self.emit(node[2])
            if b.type in ("coll", "json"):
                return E(f"mp_contains({self.coll(a)}, {self.coll(b)})", "boolean")
            return E(self.member(b, self.coll(a)), "boolean")
        if kind == "overlaps":
            a, b = self.emit(node[1]), self.emit(node[2])
            return E(f"mp_overlaps({self.coll(a)}, {self.coll(b)})", "boolean")
        if kind == "||":
            a, b = self.emit(node[1]), self.emit(node[2])
            return E(f"({self.text_of(a)} || {self.text_of(b)})", "text", const=a.const and b.const)
        if kind in ("+", "-", "*", "/", "%"):
            return self.arithmetic(kind, self.emit(node[1]), self.emit(node[2]))
        if kind == "neg":
            e = self.emit(node[1])
            if e.type == "null":
                return e
            if e.type not in NUMERIC_TYPES:
                raise Unsupported(f"-{e.type}")
            return E(f"(-{e.sql})", e.type, const=e.const)
        if kind == "cast":
            return self.cast(self.emit(node[1]), CAST_NAMES[node[2]])
        if kind == "extract":
            unit, e = node[1], self.emit(node[2])
            if unit not in EXTRACT_UNITS or e.type not in ("date", "timestamp", "null"):
                raise Unsupported(f"EXTRACT({unit} FROM {e.type})")
            if e.type == "null":
                return E("CAST(NULL AS numeric)", "numeric")
            return E(f"extract({unit} FROM {e.sql})", "numeric", const=e.const)
        if kind == "call":
            return self.call(node[1], node[2])
        if kind == "array":
            items = [self.emit(n) for n in node[1]]
            return E("jsonb_build_array(" + ", ".join(self.json_item(i) for i in items) + ")", "coll")
        if kind == "subscript":
            base, index = node[1], node[2]
            if index[0] != "number" or not index[1].isdigit():
                raise Unsupported("subscript that is not a non-negative integer literal")
            if base[0] == "call" and base[1] == "val" and len(base[2]) == 1 and base[2][0][0] == "string":
                return self.call("val", [("string", base[2][0][1] + f"[{int(index[1])}]")])
            raise Unsupported("subscript of anything but val()")
        raise Unsupported(kind)

    def compare(self, op: str, a: E, b: E) -> E:
        if a.type in ("json", "coll") or b.type in ("json", "coll"):
            raise Unsupported("comparison of JSON")
        if a.type == b.type == "null":
            return E("CAST(NULL AS boolean)", "boolean")
        t = self.unify(a.type, b.type)
        t = "text" if t in ("null", "unknown") else t
        collate = ' COLLATE "C"' if t == "text" else ""
        return E(f"({self.to(a, t)}{collate} {op} {self.to(b, t)})", "boolean")

    def like(self, insensitive: bool, s: E, p: E) -> E:
        if insensitive:
            self.features.add("case")
        subject, pattern = self.to(s, "text"), self.to(p, "text")
        if p.const and p.lit is not None:  # a constant pattern is valid, or the filter is a 400
            return E(f"({subject} {'ILIKE' if insensitive else 'LIKE'} {pattern})", "boolean")
        return E(f"{'mp_ilike' if insensitive else 'mp_like'}({subject}, {pattern})", "boolean")

    def in_list(self, x: E, items: list[E]) -> E:
        if len(items) == 1 and items[0].type in ("coll", "json"):
            return E(self.member(x, self.coll(items[0])), "boolean")
        t = x.type
        for item in items:
            t = self.unify(t, item.type)
        t = "text" if t in ("null", "unknown") else t
        collate = ' COLLATE "C"' if t == "text" else ""
        listed = ", ".join(self.to(i, t) for i in items)
        return E(f"({self.to(x, t)}{collate} IN ({listed}))", "boolean")

    def arithmetic(self, op: str, a: E, b: E) -> E:
        const = a.const and b.const
        if "date" in (a.type, b.type):
            if op == "-" and a.type == b.type == "date":
                return E(f"CAST(({a.sql} - {b.sql}) AS numeric)", "integer", const=const)
            date, days = (a, b) if a.type == "date" else (b, a)
            if op not in "+-" or (op == "-" and date is b) or days.type not in ("integer", "null"):
                raise Unsupported(f"{a.type} {op} {b.type}")
            n = self.to(days, "integer")
            return E(f"mp_date_add({date.sql}, {'-' if op == '-' else ''}({n}))", "date", const=const)
        for e in (a, b):
            if e.type not in NUMERIC_TYPES | {"null"}:
                raise Unsupported(f"{a.type} {op} {b.type}")
        t = "integer" if {a.type, b.type} <= {"integer", "null"} else "numeric"
        x, y = self.to(a, t), self.to(b, t)
        if op == "/":
            sql = f"div({x}, NULLIF({y}, 0))" if t == "integer" else f"mp_div({x}, {y})"
        elif op == "%":
            sql = f"mod({x}, NULLIF({y}, 0))"
        else:
            sql = f"mp_bound({x} {op} {y})"
        return E(sql, t, const=const)

    def cast(self, e: E, t: str) -> E:
        src = e.type
        if src == "null":
            return E(f"CAST(NULL AS {PG_TYPES[t]})", t, const=True)
        if src == "json":
            if t == "text":
                return E(f"mp_json_text({e.sql})", t)
            if t == "numeric":
                return E(f"mp_json_num({e.sql})", t)
            if t == "integer":
                return E(f"mp_bound(round(mp_json_num({e.sql})))", t)
            if t == "boolean":
                return E(f"mp_json_bool({e.sql})", t)
            self.features.add("stored-dates")
            return E(f"{'mp_date' if t == 'date' else 'mp_ts'}(mp_json_text({e.sql}))", t)
        if t == "text":
            return E(self.text_of(e), t, const=e.const)
        if src in ("unknown", "text"):
            return E(self.to(e, t), t, const=e.const)
        if src == t or (src == "integer" and t == "numeric"):
            return E(e.sql, t, const=e.const)
        if src == "numeric" and t == "integer":
            return E(f"mp_bound(round({e.sql}))", t, const=e.const)
        if src == "integer" and t == "boolean":
            return E(f"({e.sql} <> 0)", t, const=e.const)
        if src == "boolean" and t == "integer":
            return E(f"CAST(CAST({e.sql} AS integer) AS numeric)", t, const=e.const)
        if src == "date" and t == "timestamp":
            return E(f"CAST({e.sql} AS timestamptz)", t, const=e.const)
        if src == "timestamp" and t == "date":
            return E(f"CAST(({e.sql}) AT TIME ZONE 'UTC' AS date)", t, const=e.const)
        raise Unsupported(f"CAST({src} AS {t})")

    def call(self, name: str, args: list[Node]) -> E:
        if name in ("val", "vals", "exists"):
            if len(args) != 1 or args[0][0] != "string":
                raise Unsupported(f"{name}() of a non-literal path")
            path = sql_literal(jsonpath(parse_path(args[0][1]))) + "::jsonpath"
            if name == "val":
                return E(f"mp_val(m, {path})", "json")
            if name == "vals":
                return E(f"mp_vals(m, {path})", "coll")
            return E(f"coalesce(jsonb_path_exists(m, {path}), FALSE)", "boolean")
        if name in ("lower", "upper"):
            (arg,) = args
            e = self.emit(arg)
            self.features.add("case")
            return E(f"{name}({self.to(e, 'text')})", "text", const=e.const)
        if name == "now" and not args:
            return E(self.now, "timestamp", const=True)
        raise Unsupported(f"function {name}")


def translate(text: str, now: dt.datetime) -> Translation:
    """The filter as a PostgreSQL boolean expression over a jsonb column ``m`` (SQL NULL: no metadata)."""
    tr = Translator(now)
    sql = tr.boolean(Parser(text).parse())
    return Translation(sql, tr.features, text)
