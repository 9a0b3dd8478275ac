"""Calls sqlglot reads into another function's node, written back as the user wrote them.

sqlglot reads ``date_part('dow', x)`` into the node of ``EXTRACT(dow FROM x)`` and writes it back
as ``EXTRACT``, which is ``numeric`` where ``date_part`` is ``double precision`` (PostgreSQL 14
on: ``date_part('epoch', ts)`` is ``1710498030``, ``EXTRACT`` ``1710498030.000000``); it reads
``log10(x)`` as ``LOG(10, x)`` (``numeric``; ``log(integer, double precision)`` does not exist, so
``log10(f)`` over a ``double precision`` failed) and ``json_object(keys, values)`` as the SQL/JSON
``JSON_OBJECT(keys: values)``, which PostgreSQL 15 does not have. The node stays (the analysis
knows an ``EXTRACT`` over a private column); :func:`mark_calls` records on it what was written,
and the PostgreSQL generator's transforms registered here write the call back as written.

>>> import sqlglot
>>> text = "SELECT date_part('dow', ts), extract(dow FROM ts), log10(n), json_object(k, v) FROM t"
>>> mark_calls(sqlglot.parse_one(text, read="postgres"), text).sql("postgres")
"SELECT DATE_PART('dow', ts), EXTRACT(DOW FROM ts), LOG10(n), JSON_OBJECT(k, v) FROM t"
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.generator import Generator
from sqlglot.tokenizer_core import Token, TokenType

from dpsql.errors import FeatureNotSupported, InvalidParameter
from dpsql.sql.names import SPELLED

CALLED = "dpsql_called"  # the function written, on a node sqlglot shares between two forms
FIELD = "dpsql_field"  # date_part's first argument, as a string literal

_NAMES = {exp.Extract: ("date_part", "extract"), exp.JSONObject: ("json_object",)}


@dataclass
class _Call:
    name: str
    at: int  # the name's offset (for messages: 1-based)
    start: int  # the opening bracket's offset
    end: int  # the closing bracket's offset
    first: list[Token]  # the tokens of the first argument
    several: bool  # a comma at the call's own level (more than one argument)
    taken: bool = False


def _calls(tokens: list[Token], names: set[str]) -> list[_Call]:
    out: list[_Call] = []
    stack: list[tuple[str, int, list[Token], bool]] = []  # name, its index, first arg, open
    for i, tok in enumerate(tokens):
        if tok.token_type == TokenType.L_PAREN:
            before = tokens[i - 1] if i else None
            name = before.text.lower() if before and before.token_type != TokenType.STRING else ""
            if i >= 2 and tokens[i - 2].token_type in (TokenType.DOT, TokenType.DCOLON):
                name = ""
            if stack and stack[-1][3]:
                stack[-1][2].append(tok)
            stack.append((name, i, [], True))
        elif tok.token_type == TokenType.R_PAREN and stack:
            name, at, first, still_first = stack.pop()
            if stack and stack[-1][3]:
                stack[-1][2].append(tok)
            if name in names:
                where = tokens[at - 1].start + 1
                out.append(_Call(name, where, tokens[at].start, tok.start, first, not still_first))
        elif tok.token_type == TokenType.COMMA and stack and stack[-1][3]:
            name, at, first, _ = stack[-1]
            stack[-1] = (name, at, first, False)
        elif stack and stack[-1][3]:
            stack[-1][2].append(tok)
    return out


def _field(call: _Call) -> str:
    """A ``date_part`` call's field (its first argument) as a string literal; 0A000 when it is
    not a string constant."""
    first = call.first
    if len(first) != 1 or first[0].token_type != TokenType.STRING:
        raise FeatureNotSupported(
            "date_part with a field that is not a string constant is not supported by dpsql",
            position=call.at,
            hint="write the field as a string, e.g. date_part('year', d), or EXTRACT(year FROM d)",
        )
    return "'" + first[0].text.replace("'", "''") + "'"


def quoted_strings(tree: exp.Expr) -> exp.Expr:
    """Dollar-quoted strings (``$$books$$``) as the string constants they are, in place: the
    checks of a private query did not know sqlglot's node for them (``WHERE category =
    $$books$$`` was 0A000). sqlglot writes both as ``'...'``: the SQL sent is the same.

    An escape string (``E'it\\'s'``, ``E'b\\x6foks'``: sqlglot's ByteString, its escapes
    decoded) too, when its value is ASCII without NUL (newcomer27 #4: ``category = E'books'`` was
    0A000 while dpsql's own hint on standard_conforming_strings recommends E'...'): a byte escape
    past ASCII (``E'\\xff'``, refused by PostgreSQL as invalid UTF-8, or the two bytes of one
    character) is decoded by sqlglot as a character of its own, so it stays unread (refused).

    >>> quoted_strings(exp.select(exp.RawString(this="it's"))).sql("postgres")
    "SELECT 'it''s'"
    >>> quoted_strings(exp.select(exp.ByteString(this="it's"))).sql("postgres")
    "SELECT 'it''s'"
    >>> quoted_strings(exp.select(exp.ByteString(this="\xff"))).sql("postgres")
    "SELECT e'\xff'"
    """
    for raw in list(tree.find_all(exp.RawString)):
        raw.replace(exp.Literal.string(str(raw.this)))
    for esc in list(tree.find_all(exp.ByteString)):
        value = str(esc.this)
        if value.isascii() and "\x00" not in value:
            esc.replace(exp.Literal.string(value))
    return tree


def date_calls(tree: exp.Expr) -> exp.Expr:
    """``date(x)``, PostgreSQL's function form of ``CAST(x AS date)`` (the same conversion, in
    the session's time zone for a timestamptz), as that cast, in place: the checks, keys and
    ranges of a private query know the cast (``GROUP BY date(ts)`` was 0A000 "function date()
    is not supported"). A call with more arguments (no such function) is left to be refused.

    >>> date_calls(exp.select(exp.Date(this=exp.column("ts")))).sql("postgres")
    'SELECT CAST(ts AS DATE) AS date'
    """
    for call in list(tree.find_all(exp.Date)):
        if all(not v or k == "this" for k, v in call.args.items()) and call.this is not None:
            cast: exp.Expr = exp.Cast(this=call.this, to=exp.DataType.build("date"))
            if isinstance(call.parent, exp.Select) and call.arg_key == "expressions":
                cast = exp.alias_(cast, "date")  # PostgreSQL's name for the column, not x's
            call.replace(cast)
    return tree


_ESCAPE_READ = (TokenType.STRING, TokenType.HEREDOC_STRING, TokenType.NULL)


def refuse_unreadable(tokens: list[Token]) -> None:
    """Called when sqlglot can't read a statement: 0A000 for a call PostgreSQL runs that sqlglot
    reads as another form (``json_object('{a,1}')``, its one-argument form: sqlglot expects the
    SQL/JSON ``JSON_OBJECT(key: value)``), and for a ``LIKE ... ESCAPE`` whose escape is not a
    string constant (``ESCAPE category``, ``ESCAPE E'!'``: PostgreSQL takes any expression, dpsql
    reads a constant only), instead of a syntax error."""
    for i, tok in enumerate(tokens[:-1]):
        after = tokens[i + 1]
        if tok.token_type == TokenType.ESCAPE and after.token_type not in _ESCAPE_READ:
            written = (
                f"E'{after.text}'" if after.token_type == TokenType.BYTE_STRING
                else "(...)" if after.token_type == TokenType.L_PAREN
                else after.text
            )  # fmt: skip
            raise FeatureNotSupported(
                f"LIKE ... ESCAPE {written} is not supported by dpsql: the escape character of "
                "LIKE / ILIKE must be a string constant of at most one character",
                position=after.start + 1,
                hint="write it as a plain string constant, e.g. col LIKE '%x!_%' ESCAPE '!' "
                "(a column or an expression as the escape is not read)",
            )
    for call in _calls(tokens, {"json_object"}):
        if not call.several:
            raise FeatureNotSupported(
                "json_object with one argument is not supported by dpsql",
                position=call.at,
                hint="write json_object(keys, values) with two text arrays, or "
                "json_build_object('a', 1, 'b', 2)",
            )


def refuse_empty_field(tokens: list[Token]) -> None:
    """``date_part('', d)``: PostgreSQL's 22023 (sqlglot cannot read an empty field: it raised
    a ValueError, an internal error; redteam31's sweep). Called when sqlglot's reading fails so."""
    for call in _calls(tokens, {"date_part"}):
        first = call.first
        if len(first) == 1 and first[0].token_type == TokenType.STRING and not first[0].text:
            raise InvalidParameter(
                'unit "" not recognized',
                position=call.at,
                hint="date_part's first argument names a field: e.g. date_part('year', d)",
            )


def _depth(node: exp.Expr) -> int:
    d = 0
    while node.parent is not None:
        node, d = node.parent, d + 1
    return d


def mark_calls(tree: exp.Expr, text: str, tokens: list[Token] | None = None) -> exp.Expr:
    """Record on each ``EXTRACT`` node read from ``date_part(...)`` and each ``JSON_OBJECT``
    node read from ``json_object(...)`` what was written (in place; the nodes are matched to the
    calls of ``tokens``, ``text``'s tokens, by the offsets of what they contain). Raises 0A000
    for a ``date_part`` whose field is not a string constant (sqlglot reads ``date_part(f, x)``
    as ``EXTRACT(f FROM x)``: the column ``f`` would be taken for a field named f)."""
    lowered = text.lower()
    if "log10" in lowered:
        for log in tree.find_all(exp.Log):
            start, end = log.meta.get("start"), log.meta.get("end")
            if isinstance(start, int) and isinstance(end, int):
                if lowered[start : end + 1] == "log10":
                    log.meta[CALLED] = "log10"
    if "date_part" not in lowered and "json_object" not in lowered:
        return tree
    if tokens is None:
        tokens = list(Postgres().tokenize(text))
    calls = _calls(tokens, {"date_part", "extract", "json_object"})
    nodes = sorted(tree.find_all(exp.Extract, exp.JSONObject), key=_depth, reverse=True)
    for node in nodes:
        offsets = [x.meta["start"] for x in node.walk() if isinstance(x.meta.get("start"), int)]
        if not offsets:
            continue
        lo, hi = min(offsets), max(offsets)
        names = _NAMES[type(node)]
        inside = [
            c for c in calls if c.name in names and not c.taken and c.start < lo <= hi < c.end
        ]
        if not inside:
            continue
        call = max(inside, key=lambda c: c.start)
        call.taken = True
        if call.name in ("date_part", "json_object"):
            node.meta[CALLED] = call.name
        if call.name == "date_part":
            node.meta[FIELD] = _field(call)
    left = [c for c in calls if c.name in ("date_part", "extract") and not c.taken]
    unplaced = [n for n in tree.find_all(exp.Extract) if CALLED not in n.meta]
    if left and all(c.name == "date_part" for c in left) and len(left) == len(unplaced):
        # calls of constants only (date_part('dow', CURRENT_DATE)): no offsets inside, and
        # every EXTRACT node left is one of them (none was written EXTRACT)
        for call, node in zip(left, unplaced, strict=True):
            _field(call)
            call.taken = True
            node.meta[CALLED] = "date_part"
            node.meta[FIELD] = "'" + node.this.name.lower().replace("'", "''") + "'"
    for call in calls:
        if call.name == "date_part" and not call.taken:
            raise FeatureNotSupported(
                "this form of date_part is not supported by dpsql",
                position=call.at,
                hint="write EXTRACT(field FROM value), e.g. EXTRACT(year FROM d)",
            )
    return tree


_Transform = Callable[[Generator, exp.Expr], str]
_TRANSFORMS = Postgres.Generator.TRANSFORMS


def _extract_sql(self: Generator, e: exp.Expr) -> str:
    if e.meta.get(CALLED) == "date_part" and isinstance(e.meta.get(FIELD), str):
        return f"DATE_PART({e.meta[FIELD]}, {self.sql(e, 'expression')})"
    return str(self.extract_sql(e))  # type: ignore[arg-type]


def _log_sql(self: Generator, e: exp.Expr) -> str:
    if e.meta.get(CALLED) == "log10" and e.args.get("expression") is not None:
        return self.func("LOG10", e.args["expression"])
    return str(self.log_sql(e))  # type: ignore[arg-type]


_JSON_OBJECT: _Transform = _TRANSFORMS[exp.JSONObject]


def _json_object_sql(self: Generator, e: exp.Expr) -> str:
    pairs = e.expressions
    if e.meta.get(CALLED) == "json_object" and len(pairs) == 1:
        pair = pairs[0]
        if isinstance(pair, exp.JSONKeyValue):
            return self.func("JSON_OBJECT", pair.this, pair.expression)
    return _JSON_OBJECT(self, e)


_SUBSTRING: _Transform = _TRANSFORMS[exp.Substring]


def _substring_sql(self: Generator, e: exp.Expr) -> str:
    """``substr(s, start[, count])`` as written where a position is not a number constant:
    PostgreSQL's substr takes integers only (``substr(s, '2')`` is ``substr(s, 2)``), while
    ``SUBSTRING(s FROM '2')``, sqlglot's form, is the regular-expression substring (redteam31:
    ``substr('a2bc', '2')`` answered '2' where PostgreSQL gives '2bc')."""
    spelled = e.meta.get(SPELLED)
    parts = [e.args.get("start"), e.args.get("length")]
    if isinstance(spelled, str) and spelled.lower() == "substr":
        if not all(p is None or _whole_number(p) for p in parts):
            return self.func("SUBSTR", e.this, *parts)
    return _SUBSTRING(self, e)


def _whole_number(node: exp.Expr) -> bool:
    while isinstance(node, (exp.Neg, exp.Paren)):
        node = node.this
    return isinstance(node, exp.Literal) and not node.is_string


_TRANSFORMS[exp.Extract] = _extract_sql
_TRANSFORMS[exp.Substring] = _substring_sql
_TRANSFORMS[exp.Log] = _log_sql
_TRANSFORMS[exp.JSONObject] = _json_object_sql
