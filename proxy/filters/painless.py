"""The painless fallback: one fixed interpreter script, and the compiler from AST to its program.

One module although long: most of it is the interpreter's painless source, and its opcodes must be read
beside the compiler that emits them.

Constructs plain query DSL cannot express exactly (comparing two stored values, arithmetic over stored
values, functions of them) become a ``script`` query running SCRIPT_SOURCE. The source never changes, so
OpenSearch compiles it once (no per-filter compilation, no compilation-rate limit), and everything that
comes from the user, paths and values alike, travels in ``params.prog``: a postfix program over a value
stack, evaluated per document against the ``metadata_index`` doc values.

Runtime values: TEXT String, NUMERIC/INTEGER BigDecimal, BOOLEAN Boolean, DATE Long (days since epoch),
TIMESTAMP Long (microseconds since epoch, UTC), collections Set<String> of tagged elements; null is SQL
NULL / UNKNOWN.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from .evaluator import constant_value
from .indexing import SEP
from .nodes import (
    And,
    Arith,
    Case,
    Cast,
    Compare,
    Concat,
    Contains,
    Exists,
    Expr,
    Extract,
    InList,
    IsNull,
    Like,
    Member,
    Neg,
    Not,
    Or,
    Overlaps,
    SqlType,
    Val,
    Vals,
    is_constant,
)
from .paths import STAR, Path
from .values import (
    MAX_DAY,
    MAX_NUMBER_EXPONENT,
    MIN_DAY,
    compact_number,
    day_number,
    json_number,
    lower_text,
    parse_date,
    parse_timestamp,
    timestamp_key,
    upper_text,
)

__all__ = ["SCRIPT_SOURCE", "compile_program", "script_query"]

T = SqlType

# Opcodes; SCRIPT_SOURCE below uses the same numbers.
PUSH, LOAD_TEXT, LOAD_NUM, LOAD_BOOL, LOAD_DATE, LOAD_TS, JSON_NULL, EXISTS, LOAD_COLL = (
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    9,
)
NOT, AND, OR, IS_NULL, CMP, LIKE, NUMOP, NEG, DATE_ADD, DATE_DIFF, CONCAT = (
    10,
    11,
    12,
    13,
    14,
    15,
    16,
    17,
    18,
    19,
    20,
)
CONV, EXTRACT, ENCODE, MEMBER, CONTAINS, OVERLAPS, IN_LIST = 21, 22, 23, 24, 25, 26, 27

# PUSH kinds
K_NULL, K_TEXT, K_NUM, K_BOOL, K_LONG, K_SET = 0, 1, 2, 3, 4, 5
# CMP kinds and operators
C_TEXT, C_NUM, C_BOOL, C_LONG = 0, 1, 2, 3
CMP_OPS = {"=": 0, "<>": 1, "<": 2, "<=": 3, ">": 4, ">=": 5}
NUM_OPS = {"+": 0, "-": 1, "*": 2, "/": 3, "//": 4, "%": 5}
# CONV codes
NUM_TO_INT, NUM_TO_TEXT, INT_TO_BOOL, BOOL_TO_TEXT, BOOL_TO_TEXT_UPPER, BOOL_TO_INT = 0, 1, 2, 3, 4, 5
DATE_TO_TEXT, TS_TO_TEXT, DATE_TO_TS, TS_TO_DATE = 6, 7, 8, 9
EXTRACT_UNITS = {
    "year": 0,
    "quarter": 1,
    "month": 2,
    "day": 3,
    "dow": 4,
    "isodow": 5,
    "doy": 6,
    "hour": 7,
    "minute": 8,
    "second": 9,
    "epoch": 10,
}
# ENCODE kinds / element tags of a collection
ELEMENT_TAG = {T.TEXT: "s", T.NUMERIC: "N", T.INTEGER: "N", T.BOOLEAN: "b", T.DATE: "d", T.TIMESTAMP: "t"}
ENCODE_KIND = {"s": 0, "N": 1, "b": 2, "d": 3, "t": 4}
JSON_TAGS = "sNbzao"

SCRIPT_SOURCE = (
    """
String pfind(def dv, String prefix) {
  int n = dv.size();
  for (int i = 0; i < n; ++i) {
    String s = dv.get(i);
    if (s.startsWith(prefix)) { return s.substring(prefix.length()); }
  }
  return null;
}
boolean phas(def dv, String prefix) {
  int n = dv.size();
  for (int i = 0; i < n; ++i) { String s = dv.get(i); if (s.startsWith(prefix)) { return true; } }
  return false;
}
void pcollect(def dv, String prefix, String tags, boolean arrays, String tok, Set out) {
  int n = dv.size(); int k = prefix.length();
  for (int i = 0; i < n; ++i) {
    String s = dv.get(i);
    if (s.length() <= k || !s.startsWith(prefix)) { continue; }
    String tag = s.substring(k, k + 1);
    if (tags.indexOf(tag) < 0) { continue; }
    if (tag == 'a') { if (arrays) { out.add(tok); } }
    else if (tag == 'o') { out.add(tok); }
    else { out.add(s.substring(k)); }
  }
}
int cmpText(String a, String b) {
  int i = 0; int j = 0;
  while (i < a.length() && j < b.length()) {
    int ca = a.codePointAt(i); int cb = b.codePointAt(j);
    if (ca != cb) { return ca < cb ? -1 : 1; }
    i += Character.charCount(ca); j += Character.charCount(cb);
  }
  if (i < a.length()) { return 1; }
  if (j < b.length()) { return -1; }
  return 0;
}
int[] cps(String s) {
  int n = 0; int i = 0;
  while (i < s.length()) { int c = s.codePointAt(i); i += Character.charCount(c); n++; }
  int[] out = new int[n]; i = 0; int j = 0;
  while (i < s.length()) { int c = s.codePointAt(i); out[j] = c; j++; i += Character.charCount(c); }
  return out;
}
int likeMatch(String s, String p) {
  int[] pc = cps(p); int m0 = pc.length;
  int[] pt = new int[m0]; int[] pv = new int[m0]; int m = 0; int i = 0;
  while (i < m0) {
    int c = pc[i];
    if (c == 92) { if (i + 1 >= m0) { return -1; } pt[m] = 0; pv[m] = pc[i + 1]; m++; i += 2; continue; }
    if (c == 37) { pt[m] = 2; } else if (c == 95) { pt[m] = 1; } else { pt[m] = 0; pv[m] = c; }
    m++; i++;
  }
  int[] sc = cps(s); int n = sc.length; int si = 0; int pi = 0; int star = -1; int mark = 0;
  while (si < n) {
    if (pi < m && (pt[pi] == 1 || (pt[pi] == 0 && pv[pi] == sc[si]))) { si++; pi++; }
    else if (pi < m && pt[pi] == 2) { star = pi; mark = si; pi++; }
    else if (star >= 0) { pi = star + 1; mark++; si = mark; }
    else { return 0; }
  }
  while (pi < m && pt[pi] == 2) { pi++; }
  return pi == m ? 1 : 0;
}
long fdiv(long a, long b) { long q = a / b; if (a % b != 0 && ((a < 0) != (b < 0))) { q = q - 1; } return q; }
long daysFromCivil(long y0, long m, long d) {
  long y = m <= 2 ? y0 - 1 : y0;
  long era = (y >= 0 ? y : y - 399) / 400;
  long yoe = y - era * 400;
  long doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}
long[] civil(long z0) {
  long z = z0 + 719468;
  long era = (z >= 0 ? z : z - 146096) / 146097;
  long doe = z - era * 146097;
  long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  long mp = (5 * doy + 2) / 153;
  long d = doy - (153 * mp + 2) / 5 + 1;
  long m = mp < 10 ? mp + 3 : mp - 9;
  long y = yoe + era * 400 + (m <= 2 ? 1 : 0);
  return new long[] {y, m, d};
}
String pad(long v, int w) { String s = String.valueOf(v); while (s.length() < w) { s = '0' + s; } return s; }
String fmtDate(long day) {
  long[] c = civil(day);
  return pad(c[0], 4) + '-' + pad(c[1], 2) + '-' + pad(c[2], 2);
}
long parseDate(String s) {
  long y = Long.parseLong(s.substring(0, 4));
  return daysFromCivil(y, Long.parseLong(s.substring(5, 7)), Long.parseLong(s.substring(8, 10)));
}
long parseTs(String s) {
  long h = Long.parseLong(s.substring(11, 13)); long mi = Long.parseLong(s.substring(14, 16));
  long sec = Long.parseLong(s.substring(17, 19)); long f = Long.parseLong(s.substring(20, 26));
  return parseDate(s) * 86400000000L + ((h * 60 + mi) * 60 + sec) * 1000000L + f;
}
String fmtTime(long t, String sep, boolean key) {
  long day = fdiv(t, 86400000000L); long rem = t - day * 86400000000L;
  long secs = rem / 1000000L; long f = rem % 1000000L;
  String s = fmtDate(day) + sep + pad(secs / 3600, 2) + ':' + pad(secs / 60 % 60, 2) + ':'
    + pad(secs % 60, 2);
  if (key) { return s + '.' + pad(f, 6); }
  if (f != 0) {
    String fr = pad(f, 6);
    while (fr.endsWith('0')) { fr = fr.substring(0, fr.length() - 1); }
    s = s + '.' + fr;
  }
  return s;
}
def bound(BigDecimal x) {
  if (x.signum() == 0) { return x; }
  long adj = (long) x.precision() - x.scale() - 1;
  if (adj > MAX_EXP || adj < -MAX_EXP) { return null; }
  return x;
}
String canon(BigDecimal x) { return x.signum() == 0 ? '0' : x.stripTrailingZeros().toPlainString(); }
String compact(BigDecimal x) { return x.signum() == 0 ? '0' : x.stripTrailingZeros().toString(); }
def run(def doc, String f, List prog) {
  def V = doc[f + '.v'];
  def[] st = new def[prog.size() + 2];
  int sp = 0;
  for (int pc = 0; pc < prog.size(); ++pc) {
    List ins = prog.get(pc);
    int op = ins.get(0);
    if (op == 1) {
      int k = ins.get(1); def v = ins.get(2);
      if (k == 0) { st[sp] = null; }
      else if (k == 1) { st[sp] = (String) v; }
      else if (k == 2) { st[sp] = new BigDecimal((String) v); }
      else if (k == 3) { st[sp] = (boolean) v; }
      else if (k == 4) { st[sp] = Long.parseLong((String) v); }
      else { Set s = new HashSet(); for (def e : v) { s.add(e); } st[sp] = s; }
      sp++;
    } else if (op == 2) {
      int fi = ins.get(1);
      def dv = fi == 0 ? V : doc[f + (fi == 1 ? '.l' : '.u')];
      st[sp] = pfind(dv, (String) ins.get(2)); sp++;
    } else if (op >= 3 && op <= 6) {
      String s = pfind(V, (String) ins.get(1));
      if (s == null) { st[sp] = null; }
      else if (op == 3) { st[sp] = new BigDecimal(s); }
      else if (op == 4) { st[sp] = s == '1'; }
      else if (op == 5) { st[sp] = parseDate(s); }
      else { st[sp] = parseTs(s); }
      sp++;
    } else if (op == 7) {
      st[sp] = !phas(V, (String) ins.get(1)) || phas(V, (String) ins.get(2)); sp++;
    } else if (op == 8) {
      st[sp] = phas(V, (String) ins.get(1)); sp++;
    } else if (op == 9) {
      def marker = ins.get(1); def direct = ins.get(2);
      if (marker != null && !phas(V, (String) marker)) { st[sp] = null; }
      else {
        Set out = new HashSet(); String tags = ins.get(4); String tok = '#' + pc;
        if (direct != null) { pcollect(V, (String) direct, tags, false, tok, out); }
        pcollect(V, (String) ins.get(3), tags, true, tok, out);
        st[sp] = out;
      }
      sp++;
    } else if (op == 10) {
      def x = st[sp - 1]; if (x != null) { st[sp - 1] = !((boolean) x); }
    } else if (op == 11 || op == 12) {
      int n = ins.get(1); boolean sawNull = false; boolean decided = false;
      for (int i = sp - n; i < sp; ++i) {
        def x = st[i];
        if (x == null) { sawNull = true; } else if (((boolean) x) == (op == 12)) { decided = true; }
      }
      sp -= n;
      if (decided) { st[sp] = op == 12; } else if (sawNull) { st[sp] = null; } else { st[sp] = op == 11; }
      sp++;
    } else if (op == 13) {
      st[sp - 1] = st[sp - 1] == null;
    } else if (op == 14) {
      def b = st[sp - 1]; def a = st[sp - 2]; sp -= 2;
      if (a == null || b == null) { st[sp] = null; }
      else {
        int kind = ins.get(1); int cop = ins.get(2); int c;
        if (kind == 0) { c = cmpText((String) a, (String) b); }
        else if (kind == 1) { c = ((BigDecimal) a).compareTo((BigDecimal) b); }
        else if (kind == 2) { c = ((boolean) a ? 1 : 0) - ((boolean) b ? 1 : 0); }
        else { long la = a; long lb = b; c = la < lb ? -1 : (la > lb ? 1 : 0); }
        if (cop == 0) { st[sp] = c == 0; } else if (cop == 1) { st[sp] = c != 0; }
        else if (cop == 2) { st[sp] = c < 0; } else if (cop == 3) { st[sp] = c <= 0; }
        else if (cop == 4) { st[sp] = c > 0; } else { st[sp] = c >= 0; }
      }
      sp++;
    } else if (op == 15) {
      def p = st[sp - 1]; def s = st[sp - 2]; sp -= 2;
      if (p == null || s == null) { st[sp] = null; }
      else {
        int r = likeMatch((String) s, (String) p);
        if (r < 0) { st[sp] = null; } else { st[sp] = r == 1; }
      }
      sp++;
    } else if (op == 16) {
      def b = st[sp - 1]; def a = st[sp - 2]; sp -= 2; int nop = ins.get(1);
      if (a == null || b == null) { st[sp] = null; }
      else {
        BigDecimal x = a; BigDecimal y = b;
        if (nop == 0) { st[sp] = bound(x.add(y)); }
        else if (nop == 1) { st[sp] = bound(x.subtract(y)); }
        else if (nop == 2) { st[sp] = bound(x.multiply(y)); }
        else if (y.signum() == 0) { st[sp] = null; }
        else if (nop == 3) { st[sp] = bound(x.divide(y, MathContext.DECIMAL128)); }
        else if (nop == 4) { st[sp] = bound(x.divideToIntegralValue(y)); }
        else { st[sp] = bound(x.remainder(y)); }
      }
      sp++;
    } else if (op == 17) {
      def x = st[sp - 1]; if (x != null) { st[sp - 1] = ((BigDecimal) x).negate(); }
    } else if (op == 18) {
      def n = st[sp - 1]; def d = st[sp - 2]; sp -= 2; int sign = ins.get(1);
      if (n == null || d == null || ((BigDecimal) n).abs().compareTo(new BigDecimal('10000000')) > 0) {
        st[sp] = null;
      }
      else {
        long r = ((long) d) + sign * ((BigDecimal) n).longValue();
        if (r < MIN_DAY || r > MAX_DAY) { st[sp] = null; } else { st[sp] = r; }
      }
      sp++;
    } else if (op == 19) {
      def b = st[sp - 1]; def a = st[sp - 2]; sp -= 2;
      if (a == null || b == null) { st[sp] = null; }
      else { st[sp] = BigDecimal.valueOf(((long) a) - ((long) b)); }
      sp++;
    } else if (op == 20) {
      def b = st[sp - 1]; def a = st[sp - 2]; sp -= 2;
      if (a == null || b == null) { st[sp] = null; } else { st[sp] = ((String) a) + ((String) b); }
      sp++;
    } else if (op == 21) {
      def x = st[sp - 1]; int cv = ins.get(1);
      if (x != null) {
        if (cv == 0) { st[sp - 1] = bound(((BigDecimal) x).setScale(0, RoundingMode.HALF_UP)); }
        else if (cv == 1) { st[sp - 1] = canon((BigDecimal) x); }
        else if (cv == 2) { st[sp - 1] = ((BigDecimal) x).signum() != 0; }
        else if (cv == 3) { st[sp - 1] = (boolean) x ? 'true' : 'false'; }
        else if (cv == 4) { st[sp - 1] = (boolean) x ? 'TRUE' : 'FALSE'; }
        else if (cv == 5) { st[sp - 1] = (boolean) x ? BigDecimal.ONE : BigDecimal.ZERO; }
        else if (cv == 6) { st[sp - 1] = fmtDate((long) x); }
        else if (cv == 7) { st[sp - 1] = fmtTime((long) x, ' ', false); }
        else if (cv == 8) { st[sp - 1] = ((long) x) * 86400000000L; }
        else { st[sp - 1] = fdiv((long) x, 86400000000L); }
      }
    } else if (op == 22) {
      def x = st[sp - 1]; int unit = ins.get(1); boolean ts = ins.get(2);
      if (x != null) {
        long t = ts ? (long) x : ((long) x) * 86400000000L;
        long day = fdiv(t, 86400000000L); long rem = t - day * 86400000000L;
        long[] c = civil(day);
        def r;
        if (unit == 0) { r = c[0]; }
        else if (unit == 1) { r = (c[1] - 1) / 3 + 1; }
        else if (unit == 2) { r = c[1]; }
        else if (unit == 3) { r = c[2]; }
        else if (unit == 4 || unit == 5) {
          long dow = (day + 4) % 7;
          if (dow < 0) { dow += 7; }
          r = (unit == 5 && dow == 0) ? 7 : dow;
        }
        else if (unit == 6) { r = day - daysFromCivil(c[0], 1, 1) + 1; }
        else if (unit == 7) { r = rem / 3600000000L; }
        else if (unit == 8) { r = rem / 60000000L % 60; }
        else if (unit == 9) { r = null; st[sp - 1] = BigDecimal.valueOf(rem % 60000000L).movePointLeft(6); }
        else { r = null; st[sp - 1] = BigDecimal.valueOf(t).movePointLeft(6); }
        if (r != null) { st[sp - 1] = BigDecimal.valueOf((long) r); }
      }
    } else if (op == 23) {
      def x = st[sp - 1]; int ek = ins.get(1);
      if (x != null) {
        if (ek == 0) { st[sp - 1] = 's' + x; }
        else if (ek == 1) { st[sp - 1] = 'N' + compact((BigDecimal) x); }
        else if (ek == 2) { st[sp - 1] = (boolean) x ? 'b1' : 'b0'; }
        else if (ek == 3) { st[sp - 1] = 'd' + fmtDate((long) x); }
        else { st[sp - 1] = 't' + fmtTime((long) x, 'T', true); }
      }
    } else if (op == 24) {
      def coll = st[sp - 1]; def x = st[sp - 2]; sp -= 2;
      if (coll == null || x == null) { st[sp] = null; } else { st[sp] = ((Set) coll).contains(x); }
      sp++;
    } else if (op == 27) {
      int kind = ins.get(1); int n = ins.get(2); def x = st[sp - n - 1];
      boolean found = false; boolean sawNull = x == null;
      for (int i = sp - n; i < sp; ++i) {
        def y = st[i];
        if (y == null) { sawNull = true; }
        else if (x != null) {
          if (kind == 0) { found = found || cmpText((String) x, (String) y) == 0; }
          else if (kind == 1) { found = found || ((BigDecimal) x).compareTo((BigDecimal) y) == 0; }
          else { found = found || x == y; }
        }
      }
      sp -= n + 1;
      if (found) { st[sp] = true; } else if (sawNull) { st[sp] = null; } else { st[sp] = false; }
      sp++;
    } else if (op == 25 || op == 26) {
      def b = st[sp - 1]; def a = st[sp - 2]; sp -= 2;
      if (a == null || b == null) { st[sp] = null; }
      else {
        Set sa = a; boolean all = true; boolean any = false;
        for (def e : (Set) b) { if (sa.contains(e)) { any = true; } else { all = false; } }
        st[sp] = op == 25 ? all : any;
      }
      sp++;
    }
  }
  return st[sp - 1];
}
def r = run(doc, params.f, params.prog);
return r != null && r == params.want;
""".replace("MIN_DAY", f"{MIN_DAY}L")
    .replace("MAX_DAY", f"{MAX_DAY}L")
    .replace("MAX_EXP", str(MAX_NUMBER_EXPONENT))
)

Program = list[list[Any]]


def _key_prefix(path: Path, tag: str = "") -> str:
    return f"{path.key()}{SEP}{tag}"


class _Emitter:
    def __init__(self, now: dt.datetime | None):
        self.now = now
        self.prog: Program = []

    def emit(self, op: int, *args: Any) -> None:
        self.prog.append([op, *args])

    # --- constants ------------------------------------------------------------------------------------
    def push_value(self, value: Any, type_: SqlType) -> None:
        if value is None:
            self.emit(PUSH, K_NULL, None)
        elif type_ is T.TEXT:
            self.emit(PUSH, K_TEXT, value)
        elif type_.is_numeric:
            self.emit(PUSH, K_NUM, compact_number(value))
        elif type_ is T.BOOLEAN:
            self.emit(PUSH, K_BOOL, bool(value))
        elif type_ is T.DATE:
            self.emit(PUSH, K_LONG, str(day_number(value)))
        elif type_ is T.TIMESTAMP:
            self.emit(PUSH, K_LONG, str(value))
        else:
            raise AssertionError(type_)

    # --- values ---------------------------------------------------------------------------------------
    def value(self, e: Expr) -> None:
        if is_constant(e) and e.type.is_scalar:
            self.push_value(constant_value(e, now=self.now), e.type)
            return
        method = getattr(self, "e_" + type(e).__name__)
        method(e)

    def text(self, e: Expr, case: str | None) -> None:
        """Emit a TEXT value with lower()/upper() pushed down to its leaves: stored strings are read from
        their pre-folded l/u entries, constants are folded here, so painless never maps case itself."""
        if is_constant(e):
            v = constant_value(e, now=self.now)
            if v is not None and case is not None:
                v = lower_text(v) if case == "lower" else upper_text(v)
            self.push_value(v, T.TEXT)
        elif isinstance(e, Case):
            self.text(e.arg, e.fn)
        elif isinstance(e, Concat):
            self.text(e.left, case)
            self.text(e.right, case)
            self.emit(CONCAT)
        elif isinstance(e, Cast) and e.arg.type is T.JSON:
            assert isinstance(e.arg, Val), "constant JSON is folded above"
            field = {None: 0, "lower": 1, "upper": 2}[case]
            self.emit(LOAD_TEXT, field, _key_prefix(e.arg.path, "s" if field == 0 else ""))
        elif isinstance(e, Cast) and e.arg.type is T.BOOLEAN:
            self.value(e.arg)
            self.emit(CONV, BOOL_TO_TEXT_UPPER if case == "upper" else BOOL_TO_TEXT)
        else:
            self.value(e)  # numbers, dates and timestamps print without letters: case is moot

    def e_Case(self, e: Case) -> None:
        self.text(e, None)

    def e_Concat(self, e: Concat) -> None:
        self.text(e, None)

    def e_Cast(self, e: Cast) -> None:
        src, target = e.arg.type, e.type
        inner = e.arg
        if isinstance(inner, Cast) and src is T.TEXT and inner.arg.type is T.JSON:
            # CAST(CAST(val(p) AS TEXT) AS DATE) reads the same index entry as CAST(val(p) AS DATE)
            inner = inner.arg
        if inner.type is T.JSON:
            assert isinstance(inner, Val), "constant JSON is folded"
            if target is T.TEXT:
                self.text(e, None)
            elif target.is_numeric:
                self.emit(LOAD_NUM, _key_prefix(inner.path, "N"))
                if target is T.INTEGER:
                    self.emit(CONV, NUM_TO_INT)
            elif target is T.BOOLEAN:
                self.emit(LOAD_BOOL, _key_prefix(inner.path, "b"))
            elif target is T.DATE:
                self.emit(LOAD_DATE, _key_prefix(inner.path, "d"))
            elif target is T.TIMESTAMP:
                self.emit(LOAD_TS, _key_prefix(inner.path, "t"))
            else:
                raise AssertionError(target)
            return
        if target is T.TEXT:
            if src is T.BOOLEAN:
                self.value(e.arg)
                self.emit(CONV, BOOL_TO_TEXT)
                return
            self.value(e.arg)
            if src.is_numeric:
                self.emit(CONV, NUM_TO_TEXT)
            elif src is T.DATE:
                self.emit(CONV, DATE_TO_TEXT)
            elif src is T.TIMESTAMP:
                self.emit(CONV, TS_TO_TEXT)
            return
        self.value(e.arg)
        conv = {
            (T.NUMERIC, T.INTEGER): NUM_TO_INT,
            (T.INTEGER, T.BOOLEAN): INT_TO_BOOL,
            (T.BOOLEAN, T.INTEGER): BOOL_TO_INT,
            (T.DATE, T.TIMESTAMP): DATE_TO_TS,
            (T.TIMESTAMP, T.DATE): TS_TO_DATE,
        }.get((src, target))
        if conv is not None:
            self.emit(CONV, conv)
        elif not (src is T.INTEGER and target is T.NUMERIC):
            raise AssertionError((src, target))

    def e_Extract(self, e: Extract) -> None:
        self.value(e.arg)
        self.emit(EXTRACT, EXTRACT_UNITS[e.unit], e.arg.type is T.TIMESTAMP)

    def e_Neg(self, e: Neg) -> None:
        self.value(e.arg)
        self.emit(NEG)

    def e_Arith(self, e: Arith) -> None:
        self.value(e.left)
        self.value(e.right)
        if e.left.type is T.DATE:
            if e.right.type is T.DATE:
                self.emit(DATE_DIFF)
            else:
                self.emit(DATE_ADD, 1 if e.op == "+" else -1)
            return
        op = "//" if e.op == "/" and e.type is T.INTEGER else e.op
        self.emit(NUMOP, NUM_OPS[op])

    # --- collections ----------------------------------------------------------------------------------
    def collection(self, e: Expr, tags: str) -> None:
        if is_constant(e):
            v = constant_value(e, now=self.now)
            items = v if isinstance(v, list) else None
            if items is None:
                self.emit(PUSH, K_NULL, None)
            else:
                encoded = {c for c in (_encode_element(x, tags) for x in items) if c is not None}
                self.emit(PUSH, K_SET, sorted(encoded))
        elif isinstance(e, Vals):
            self.emit(LOAD_COLL, None, _key_prefix(e.path), _key_prefix(e.path.child(STAR)), tags)
        elif isinstance(e, Val):
            self.emit(LOAD_COLL, _key_prefix(e.path, "a"), None, _key_prefix(e.path.child(STAR)), tags)
        else:
            raise AssertionError(type(e))

    def element(self, e: Expr) -> str:
        """Emit a scalar as the tagged element text a collection holds; return the tag."""
        tag = ELEMENT_TAG[e.type]
        self.value(e)
        self.emit(ENCODE, ENCODE_KIND[tag])
        return tag

    # --- predicates -----------------------------------------------------------------------------------
    def e_Exists(self, e: Exists) -> None:
        self.emit(EXISTS, _key_prefix(e.path))

    def e_Compare(self, e: Compare) -> None:
        self.value(e.left)
        self.value(e.right)
        t = e.left.type
        kind = C_TEXT if t is T.TEXT else C_NUM if t.is_numeric else C_BOOL if t is T.BOOLEAN else C_LONG
        self.emit(CMP, kind, CMP_OPS[e.op])

    def e_Like(self, e: Like) -> None:
        case = "lower" if e.ci else None
        self.text(e.arg, case)
        self.text(e.pattern, case)
        self.emit(LIKE)
        if e.negated:
            self.emit(NOT)

    def e_IsNull(self, e: IsNull) -> None:
        if e.arg.type is T.ARRAY:
            self.emit(PUSH, K_BOOL, False)
        elif isinstance(e.arg, Val):
            self.emit(JSON_NULL, _key_prefix(e.arg.path), _key_prefix(e.arg.path, "z"))
        else:
            self.value(e.arg)
            self.emit(IS_NULL)
        if e.negated:
            self.emit(NOT)

    def e_InList(self, e: InList) -> None:
        self.value(e.arg)  # once: repeating it per item would grow nested IN lists exponentially
        for item in e.items:
            self.value(item)
        t = e.arg.type
        self.emit(IN_LIST, C_TEXT if t is T.TEXT else C_NUM if t.is_numeric else C_LONG, len(e.items))
        if e.negated:
            self.emit(NOT)

    def e_Member(self, e: Member) -> None:
        tag = self.element(e.arg)
        self.collection(e.coll, tag)
        self.emit(MEMBER)
        if e.negated:
            self.emit(NOT)

    def e_Contains(self, e: Contains) -> None:
        if e.right.type.is_scalar:
            tag = self.element(e.right)
            self.collection(e.left, tag)
            self.emit(MEMBER)
            return
        self.collection(e.left, JSON_TAGS)
        self.collection(e.right, JSON_TAGS)
        self.emit(CONTAINS)

    def e_Overlaps(self, e: Overlaps) -> None:
        self.collection(e.left, JSON_TAGS)
        self.collection(e.right, JSON_TAGS)
        self.emit(OVERLAPS)

    def e_And(self, e: And) -> None:
        for item in e.items:
            self.value(item)
        self.emit(AND, len(e.items))

    def e_Or(self, e: Or) -> None:
        for item in e.items:
            self.value(item)
        self.emit(OR, len(e.items))

    def e_Not(self, e: Not) -> None:
        self.value(e.arg)
        self.emit(NOT)

    def e_Val(self, e: Val) -> None:
        raise AssertionError("val() is only read through CAST, IS NULL or a collection operator")

    e_Vals = e_ArrayLit = e_JsonConst = e_Lit = e_Now = e_Val


def _encode_element(value: Any, tags: str) -> str | None:
    """A constant collection element as the tagged text LOAD_COLL would produce for it (None: the element
    cannot match anything the tags select)."""
    if isinstance(value, bool):
        return ("b1" if value else "b0") if "b" in tags else None
    if value is None:
        return "z" if "z" in tags else None
    if isinstance(value, str):
        if "s" in tags:
            return "s" + value
        if "d" in tags:
            date = parse_date(value)
            return None if date is None else "d" + date.isoformat()
        if "t" in tags:
            micros = parse_timestamp(value)
            return None if micros is None else "t" + timestamp_key(micros)
        return None
    number = json_number(value)
    if number is not None and "N" in tags:
        return "N" + compact_number(number)
    return None


def compile_program(expr: Expr, *, now: dt.datetime | None = None) -> Program:
    emitter = _Emitter(now)
    emitter.value(expr)
    return emitter.prog


def script_query(expr: Expr, want: bool, field: str, *, now: dt.datetime | None = None) -> dict[str, Any]:
    """A script query matching the documents where the boolean ``expr`` evaluates to ``want``."""
    return {
        "script": {
            "script": {
                "lang": "painless",
                "source": SCRIPT_SOURCE,
                "params": {"f": field, "want": want, "prog": compile_program(expr, now=now)},
            }
        }
    }
