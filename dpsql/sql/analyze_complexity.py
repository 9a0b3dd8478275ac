"""Size limits on a private statement, checked before any other analysis (SQLSTATE 54001).

Rewriting a private query makes every row-level arithmetic operation total
(:mod:`dpsql.sql.rewrite.make_total`): each operand of ``+ - * / %`` and each cast is wrapped in a
clamp and a rounding, so the generated SQL is several times larger than the analyst's and nests
as deeply as the analyst's arithmetic. A statement with thousands of operators, or arithmetic
nested hundreds of levels deep, would cost seconds of proxy CPU per statement (and, past Python's
recursion limit, fail with an internal error). The limits are constants, far above hand-written
and BI-generated SQL:

* at most :data:`MAX_STATEMENT_NODES` syntax nodes in the statement (a 2,000-value IN list is
  about 2,000 nodes);
* at most :data:`MAX_ARITHMETIC_NODES` arithmetic operators and casts in the statement;
* arithmetic nested at most :data:`MAX_ARITHMETIC_DEPTH` levels deep.

The walk is iterative (breadth-first), so a deep tree can't exhaust the stack here.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import StatementTooComplex

MAX_STATEMENT_NODES = 10_000
MAX_ARITHMETIC_NODES = 256
MAX_ARITHMETIC_DEPTH = 64
MAX_TIME_NESTING = 3
"""Date/time conversions of a row's value (``date_trunc``, ``to_char``, ``date_part``, casts to
``timestamp``/``timestamptz``) nested in one another. Each reads its argument through
:func:`dpsql.sql.rewrite.total_dates.within_timestamps`, which reads its value three times, so n
nested ones are 3^n copies of the innermost: ``date_trunc`` nested 10 deep (160 characters) took
178 s of proxy CPU holding the interpreter lock, and PostgreSQL evaluated the 59,049 copies for
each row that reached them (a row made slow on purpose: a timing channel)."""
MAX_QUERY_BLOCKS = 128
"""SELECTs (subqueries, CTEs, set-operation branches) in any statement, public ones included:
PostgreSQL plans a chain of n inlined CTEs in time that grows steeply with n (100: 0.3 s,
250: 4.7 s, 500: over 30 s, past its own statement timeout, on the 2-core test machine)."""

ARITHMETIC = (
    exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv, exp.Pow,
    exp.Neg, exp.Abs, exp.Cast, exp.TryCast,
)  # fmt: skip

_HINT = (
    "split the computation into several simpler queries, or precompute the expression in a view "
    "or column that the policy declares with bounds"
)


def check_complexity(tree: exp.Expr) -> None:
    """Refuse a statement over dpsql's size limits.

    Raises:
        StatementTooComplex: too many nodes, too many arithmetic operators, or arithmetic
            nested too deeply.

    >>> import sqlglot
    >>> check_complexity(sqlglot.parse_one("SELECT SUM(a + b * 2) FROM t"))
    >>> check_complexity(sqlglot.parse_one("SELECT SUM(" + " + ".join(["a"] * 100) + ") FROM t"))
    Traceback (most recent call last):
    ...
    dpsql.errors.StatementTooComplex: arithmetic is nested more than 64 levels deep
    """
    depth: dict[int, int] = {}
    nodes = arithmetic = 0
    for node in tree.bfs():
        nodes += 1
        if nodes > MAX_STATEMENT_NODES:
            raise StatementTooComplex(
                f"the statement has more than {MAX_STATEMENT_NODES} syntax nodes", hint=_HINT
            )
        up = depth.get(id(node.parent), 0) if node.parent is not None else 0
        if isinstance(node, ARITHMETIC):
            arithmetic += 1
            up += 1
            if arithmetic > MAX_ARITHMETIC_NODES:
                raise StatementTooComplex(
                    f"the statement has more than {MAX_ARITHMETIC_NODES} arithmetic operators "
                    "and casts",
                    hint=_HINT,
                )
            if up > MAX_ARITHMETIC_DEPTH:
                raise StatementTooComplex(
                    f"arithmetic is nested more than {MAX_ARITHMETIC_DEPTH} levels deep",
                    hint=_HINT,
                )
        if up:
            depth[id(node)] = up


_TO_TIMESTAMP = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ)


def _converts_time(n: exp.Expr) -> bool:
    """``n`` converts its argument to a timestamp (what make_total reads within_timestamps)."""
    if isinstance(n, exp.Cast):
        return n.to.this in _TO_TIMESTAMP
    if isinstance(n, (exp.DateTrunc, exp.TimestampTrunc, exp.TimeToStr)):
        return True
    if isinstance(n, exp.Extract):
        return n.meta.get("dpsql_called") == "date_part"
    return isinstance(n, exp.Anonymous) and str(n.name).lower() == "date_part"


def check_time_nesting(tree: exp.Expr) -> None:
    """Refuse date/time conversions nested more than :data:`MAX_TIME_NESTING` deep (checked on
    the flattened statement: a derived table's column is its expression there).

    Raises:
        StatementTooComplex: conversions nested too deeply.

    >>> import sqlglot
    >>> check_time_nesting(sqlglot.parse_one("SELECT to_char(date_trunc('day', d), 'YYYY') FROM t"))
    >>> deep = "date_trunc('day', " * 4 + "d" + ")" * 4
    >>> check_time_nesting(sqlglot.parse_one(f"SELECT COUNT(*) FROM t GROUP BY {deep}"))
    Traceback (most recent call last):
    ...
    dpsql.errors.StatementTooComplex: date/time conversions (date_trunc, to_char, date_part, casts to timestamp) are nested more than 3 deep
    """
    depth: dict[int, int] = {}
    for node in tree.bfs():
        up = depth.get(id(node.parent), 0) if node.parent is not None else 0
        if _converts_time(node):
            up += 1
            if up > MAX_TIME_NESTING:
                raise StatementTooComplex(
                    "date/time conversions (date_trunc, to_char, date_part, casts to timestamp) "
                    f"are nested more than {MAX_TIME_NESTING} deep",
                    hint="truncate or format once: date_trunc('month', d) already is a "
                    "timestamp, to_char(d, 'YYYY-MM') a text",
                )
        if up:
            depth[id(node)] = up


def check_query_blocks(tree: exp.Expr) -> None:
    """Refuse a statement (private, public or catalog) with more than :data:`MAX_QUERY_BLOCKS`
    SELECTs, before anything plans it.

    Raises:
        StatementTooComplex: too many SELECTs.

    >>> import sqlglot
    >>> check_query_blocks(sqlglot.parse_one("WITH a AS (SELECT 1) SELECT * FROM a"))
    """
    blocks = 0
    for _ in tree.find_all(exp.Select):
        blocks += 1
        if blocks > MAX_QUERY_BLOCKS:
            raise StatementTooComplex(
                f"statement too complex: more than {MAX_QUERY_BLOCKS} SELECTs (subqueries, CTEs "
                "and UNION branches)",
                hint="split the statement into smaller ones, or move parts of it into views",
            )
