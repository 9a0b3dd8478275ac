"""Keyed hashes that choose which rows and groups of a unit are kept (instead of ``random()``).

Contribution bounding keeps at most R rows of a unit in a group and at most G groups of a unit.
Which ones it keeps is decided by ``hashtextextended(<salt> | <identity>, 0)``, smallest first,
the identity itself breaking ties: the choice is a function of the unit's own rows and the
statement's salt only (the privacy argument: docs/mechanisms.md, "Choosing rows and groups").
Unlike ``random()`` the hash is immutable and parallel safe, so PostgreSQL may run the bounding
in parallel workers, inline the CTEs, and Citus may push it to the workers.

The identity of a row is the text of the values the query reads from it, as a row constructor
(``ROW(unit, keys..., values...)::text``: quoted, so no two different rows print alike, NULL
apart from ''). Two rows with the same identity are the same to every measure, so which of them
is kept does not change the result: no physical property (``ctid``, the order of the scan) is
ever read. The identity of a group is (unit, keys) with NULL and each value told apart.

The salt is a fresh CSPRNG token per execution (:func:`dpsql.execute.private_sql.salted`); the
guarantee holds for every salt value, even one the analyst knew: the salt only keeps the choice
from favouring the same rows and groups in every statement.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp


def group_hash(salt: str, unit: exp.Expr, gcols: Sequence[exp.Expr]) -> exp.Expr:
    """A salted 64-bit hash of (unit, group keys): the order in which a unit's groups are kept.

    NULL and the text 'n' hash apart (keys are prefixed with 'v'). Ties (a collision) are broken
    by the keys themselves where it is used.
    """
    parts: list[exp.Expr] = [exp.Literal.string(salt), exp.cast(unit.copy(), "text")]
    for g in gcols:
        text = exp.DPipe(this=exp.Literal.string("v"), expression=exp.cast(g.copy(), "text"))
        parts.append(exp.Coalesce(this=text, expressions=[exp.Literal.string("n")]))
    digest = exp.Anonymous(this="concat_ws", expressions=[exp.Literal.string("|"), *parts])
    return exp.Anonymous(this="hashtextextended", expressions=[digest, exp.Literal.number(0)])


def row_identity(columns: list[exp.Expr]) -> exp.Expr:
    """``CAST(ROW(columns...) AS TEXT)``: a row's values as unambiguous text."""
    return exp.cast(exp.Anonymous(this="ROW", expressions=[c.copy() for c in columns]), "text")


def row_order(salt: str, identity: exp.Expr) -> list[exp.Ordered]:
    """``ORDER BY hashtextextended(salt || '|' || identity, 0), identity``: a salted order of a
    unit's rows, total on distinct identities (the text breaks a hash collision)."""
    digest = exp.Anonymous(
        this="concat_ws",
        expressions=[exp.Literal.string("|"), exp.Literal.string(salt), identity.copy()],
    )
    h = exp.Anonymous(this="hashtextextended", expressions=[digest, exp.Literal.number(0)])
    return [exp.Ordered(this=h), exp.Ordered(this=identity.copy())]
