"""The constants PostgreSQL's parser reads in a text, and the check that dpsql sends the same ones.

dpsql sends SQL written from sqlglot's tree, and sqlglot rewrites some constants as it reads
and writes them: ``INTERVAL '1 day ago'`` became ``INTERVAL '1 DAY'`` (the sign lost),
``INTERVAL '1 day 01:02'`` ``'1 DAY'``, ``INTERVAL '1.5' DAY`` (one day: the qualifier drops
the fraction) ``'1.5 DAY'`` (a day and a half), ``INTERVAL '1 day 2 hours' DAY`` a column
named ``day``, ``'101'::bit varying`` a ``bit(1)``, ``date_trunc('ſecond', d)`` (PostgreSQL:
unit not recognized) ``'SECOND'``. :func:`constants` reads a statement's constants from
PostgreSQL's own parse tree (pglast's JSON), each with its context; :func:`check_same_constants`
compares the user's text with the SQL dpsql writes from its tree of it (the SQL every answer
is built from) and refuses (0A000) where a constant of the user's text is not in it as written:
a constant rewritten is one the user wrote gone (and another one sent). A constant only dpsql's
SQL has is not refused: sqlglot and dpsql add some by design, ``MEDIAN(x)`` is dpsql's
``PERCENTILE_CONT(0.5)``, sqlglot writes ``round(AVG(x), 2)`` as ``ROUND(CAST(AVG(x) AS
DECIMAL), 2)`` (the same for a numeric argument; PostgreSQL has no ``round(double precision,
integer)``), ``substring(x FOR 3)`` as ``SUBSTRING(x FROM 1 FOR 3)``.

Rewrites read as the same constant here, each because PostgreSQL reads both forms alike:

* a unit of ``date_trunc`` / ``date_part`` / ``EXTRACT`` in another ASCII case (PostgreSQL
  lowercases it: ``'MONTH'`` is ``'month'``); a non-ASCII letter is compared as written;
* an interval string ``<number> <unit>`` with the unit spelled another way PostgreSQL's
  interval input reads alike (``'1 day'``, ``'1 DAY'``, ``'1day'``, ``'1 d'``, ``'+1 days'``,
  ``'@ 1 day'``: one day), and ``INTERVAL '1' DAY`` (a whole number with one field) as
  ``'1 day'``; a fraction with a field (``INTERVAL '1.5' DAY``) is not rewritten alike;
* a number in another spelling of the same value and scale (``.5`` and ``0.5``, ``00012`` and
  ``12``: PostgreSQL's numeric keeps the scale written, ``1.50`` is not ``1.5``);
* a type by another of its names (``int4`` / ``integer`` / ``int``, ``float8`` / ``double
  precision``, ``decimal`` / ``numeric``): PostgreSQL's parser names them alike once
  ``pg_catalog.`` is left out;
* ``date(x)``, dpsql's own reading of it as ``CAST(x AS date)`` (dpsql.sql.faithful.date_calls);
* ``regexp_like(s, 'b', 'i')`` as sqlglot's ``s ~* 'b'`` (flags of ``i`` and ``c`` only: any
  other flag is compared, and refused where sqlglot drops it);
* string constants continued over a newline (``'a'<newline>'b'``, one constant ``'ab'``), which
  sqlglot writes ``CONCAT('a', 'b')``: the same text (read as one string wherever a ``concat``
  of string constants is written).

>>> import json
>>> from pglast import parser
>>> def facts(sql):
...     return sorted(constants(json.loads(parser.parse_sql_json(sql))["stmts"]).elements())
>>> facts("SELECT INTERVAL '1' DAY, date_trunc('MONTH', d), .5, 'x'::int4")
[('field', 'month'), ('interval', '1 day', ''), ('number', '0.5'), ('string', 'x'), ('type', 'int4', '', '')]
>>> facts("SELECT INTERVAL '1 DAY', date_trunc('month', d), 0.5, CAST('x' AS integer)")
[('field', 'month'), ('interval', '1 day', ''), ('number', '0.5'), ('string', 'x'), ('type', 'int4', '', '')]
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Any

Fact = tuple[str, ...]

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_FIELD_CALLS = frozenset({"date_trunc", "date_part", "extract"})

# PostgreSQL's interval units (datetime.c's deltatktbl) and the unit each spelling means
_UNITS = {
    word: unit
    for unit, words in {
        "year": "y yr yrs year years",
        "month": "mon mons month months",
        "week": "w week weeks",
        "day": "d day days",
        "hour": "h hr hrs hour hours",
        "minute": "m min mins minute minutes",
        "second": "s sec secs second seconds",
        "millisecond": "ms msec msecs msecond mseconds millisecond milliseconds",
        "microsecond": "us usec usecs usecond useconds microsecond microseconds",
        "decade": "dec decs decade decades",
        "century": "c cent century centuries",
        "millennium": "mil mils millennium millennia",
    }.items()
    for word in words.split()
}
# INTERVAL '1' DAY: the qualifier's mask (PostgreSQL's INTERVAL_MASK of one field)
_ONE_FIELD = {4: "year", 2: "month", 8: "day", 1024: "hour", 2048: "minute", 4096: "second"}
_NUMBER_UNIT = re.compile(r"\s*@?\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*([A-Za-z]+)\s*")
_WHOLE = re.compile(r"\s*[+-]?\d+\s*")


def _number(text: str) -> str:
    """A numeric constant as PostgreSQL's value and display scale (``.5`` and ``0.5`` alike,
    ``1.50`` not ``1.5``, ``1e3`` ``1000``)."""
    try:
        d = Decimal(text)
        exponent = d.as_tuple().exponent
        if not isinstance(exponent, int) or abs(exponent) > 1000 or len(text) > 1000:
            return text
        return format(d.quantize(Decimal(1).scaleb(min(exponent, 0))), "f")
    except (InvalidOperation, ValueError):
        return text


def _interval(text: str, mods: list[Any]) -> Fact:
    masks = [m for m in (_const_value(x) for x in mods)]
    if len(masks) == 1 and masks[0] in _ONE_FIELD and _WHOLE.fullmatch(text):
        return ("interval", f"{int(text)} {_ONE_FIELD[masks[0]]}", "")
    m = _NUMBER_UNIT.fullmatch(text)
    if m and m.group(2).translate(_ASCII_LOWER) in _UNITS:
        number = _number(m.group(1).lstrip("+"))
        text = f"{number} {_UNITS[m.group(2).translate(_ASCII_LOWER)]}"
    return ("interval", text, " ".join(map(str, masks)))


def _const_value(node: Any) -> str | int | None:
    """An ``A_Const``'s value (an integer as an int), None for anything else."""
    val = node.get("A_Const") if isinstance(node, dict) else None
    if not isinstance(val, dict):
        return None
    if "ival" in val:
        return int(val["ival"].get("ival", 0))
    for key in ("sval", "fval", "bsval"):
        if key in val:
            return str(val[key].get(key, ""))
    return None


def _sval(node: Any) -> str | None:
    """A string constant's value (``'...'``), None for anything else."""
    const = node.get("A_Const", {}) if isinstance(node, dict) else {}
    return str(const["sval"].get("sval", "")) if "sval" in const else None


def _case_flags(node: Any) -> bool:
    """regexp_like's flags when only i / c (sqlglot writes ``s ~* 'b'`` for ``regexp_like(s,
    'b', 'i')``, ``s ~ 'b'`` for 'c', the last of them deciding, as PostgreSQL's)."""
    flags = _sval(node)
    return bool(flags) and set(flags or "") <= {"i", "c"}


def _constant(val: dict[str, Any]) -> Fact:
    if "sval" in val:
        return ("string", val["sval"].get("sval", ""))
    if "ival" in val:
        return ("number", str(val["ival"].get("ival", 0)))
    if "fval" in val:
        return ("number", _number(val["fval"].get("fval", "0")))
    if "bsval" in val:
        return ("bits", val["bsval"].get("bsval", ""))
    if "boolval" in val:
        return ("boolean", "true" if val["boolval"].get("boolval") else "false")
    return ("null",)


def _type(node: dict[str, Any]) -> Fact:
    names = [n.get("String", {}).get("sval", "") for n in node.get("names", [])]
    if len(names) > 1 and names[0] == "pg_catalog":
        names = names[1:]
    mods = " ".join(str(_const_value(m)) for m in node.get("typmods", []))
    array = str(len(node.get("arrayBounds", [])) or "")
    return ("type", ".".join(names), mods, array)


def _called(val: dict[str, Any]) -> str:
    names = val.get("funcname", [])
    return str(names[-1].get("String", {}).get("sval", "")) if names else ""


def tree_nodes(stack: list[Any]) -> Iterator[dict[str, Any]]:
    """The nodes (dicts) of pglast's JSON parse tree, depth first: pops ``stack`` (nodes and lists
    of nodes) until it is empty; the caller pushes onto it the children it reads on. The one walk
    of PostgreSQL's tree: :func:`constants` here, :func:`dpsql.sql.pg_reading.pg_reading`."""
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            yield node


def constants(stmts: list[Any]) -> Counter[Fact]:
    """Every constant of PostgreSQL's parse tree ``stmts`` (pglast's JSON ``stmts``) as a fact
    (its kind, value as PostgreSQL reads it, context: see the module's docstring)."""
    out: Counter[Fact] = Counter()
    stack: list[Any] = [s.get("stmt", {}) for s in stmts]
    for node in tree_nodes(stack):
        for key, val in node.items():
            if not isinstance(val, (dict, list)):
                continue
            if key == "A_Const" and isinstance(val, dict):
                out[_constant(val)] += 1
            elif key == "TypeCast" and isinstance(val, dict):
                tn = val.get("typeName", {})
                arg = val.get("arg")
                text = _sval(arg)
                if _type(tn)[1] == "interval" and isinstance(text, str):
                    out[_interval(text, tn.get("typmods", []))] += 1
                else:
                    if val.get("location", -1) >= 0 or tn.get("location", -1) >= 0:
                        out[_type(tn)] += 1  # (not the grammar's own: substring(x FOR n))
                    stack.append(arg)
            elif key in ("TypeName", "typeName") and isinstance(val, dict):
                out[_type(val)] += 1
            elif key == "FuncCall" and isinstance(val, dict):
                args = list(val.get("args", []))
                name = _called(val)
                field = _const_value(args[0]) if args else None
                if name in _FIELD_CALLS and isinstance(field, str):
                    out[("field", field.translate(_ASCII_LOWER))] += 1
                    args = args[1:]
                elif name == "date" and len(args) == 1 and len(val.get("funcname", [])) == 1:
                    out[("type", "date", "", "")] += 1  # dpsql reads date(x) as x::date
                elif name == "regexp_like" and len(args) == 3 and _case_flags(args[2]):
                    args = args[:2]  # sqlglot writes the flags as the operator: ~* / ~
                elif name == "concat" and args and all(_sval(a) is not None for a in args):
                    out[("string", "".join(_sval(a) or "" for a in args))] += 1
                    args = []  # 'a'<newline>'b', one constant 'ab', written CONCAT('a', 'b')
                rest = {k: v for k, v in val.items() if k not in ("args", "funcname")}
                stack.extend([args, rest])
            elif key == "CollateClause" and isinstance(val, dict):
                names = [n.get("String", {}).get("sval", "") for n in val.get("collname", [])]
                out[("collation", ".".join(names))] += 1
                stack.append(val.get("arg"))
            else:
                stack.append(val)
    return out


_FIELD_ORDER = [(4, "YEAR"), (2, "MONTH"), (8, "DAY"), (1024, "HOUR"), (2048, "MINUTE"),
                (4096, "SECOND")]  # fmt: skip


def _qualifier(mods: str) -> str:
    """An interval's typmods (a field mask, a precision) as written: ``DAY``, ``HOUR TO
    MINUTE``, ``(3)``."""
    parts = [int(m) for m in mods.split() if m.lstrip("-").isdigit()]
    if not parts:
        return ""
    fields = [name for bit, name in _FIELD_ORDER if parts[0] & bit and parts[0] != 32767]
    words = " TO ".join(fields[:1] + fields[1:][-1:])
    return (" " + words if words else "") + (f"({parts[1]})" if len(parts) > 1 else "")


def written(fact: Fact) -> str:
    """A fact in the user's terms (for the refusal's words)."""
    kind, value = fact[0], fact[1] if len(fact) > 1 else ""
    quoted = "'" + value.replace("'", "''") + "'"
    if kind == "interval":
        return f"INTERVAL {quoted}{_qualifier(fact[2])}"
    if kind == "type":
        return f"the type {value}" + (f"({fact[2]})" if fact[2] else "") + "[]" * int(fact[3] or 0)
    if kind == "collation":
        return f'COLLATE "{value}"'
    if kind in ("string", "bits", "field"):
        return quoted
    return value or kind.upper()


_HINTS = {
    "interval": "write the interval as INTERVAL '<number> <unit>' or with every part "
    "spelled out (INTERVAL '-1 day' for '1 day ago', INTERVAL '1 day 1 hour 2 minutes' for "
    "'1 day 01:02', a whole number before a qualifier: INTERVAL '36 hours', not '1.5' DAY)",
    "type": "write the type by its plain name (varbit, not bit varying; a cast with ::)",
    "field": "write the unit in ASCII letters, e.g. date_trunc('month', d)",
}


def differing(mine: Counter[Fact], sent: Counter[Fact]) -> tuple[list[Fact], list[Fact]]:
    """The facts of the user's text dpsql would not send, and those it would send instead."""
    return sorted((mine - sent).elements()), sorted((sent - mine).elements())


def hint_for(facts: list[Fact]) -> str:
    for f in facts:
        if f[0] in _HINTS:
            return _HINTS[f[0]]
    return (
        "write the constant in a plainer form (a plain '...' string, a number in decimal "
        "digits, a cast with ::)"
    )
