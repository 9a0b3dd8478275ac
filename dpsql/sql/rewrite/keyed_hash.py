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

from collections.abc import Collection, Sequence

from sqlglot import exp

HASHED_TYPES = frozenset(
    {
        "int2", "int4", "int8", "oid", "numeric", "float4", "float8", "bool", "text", "varchar",
        "bpchar", "name", "char", "date", "time", "timestamp", "timestamptz", "interval", "uuid",
    }
)  # fmt: skip
"""PostgreSQL types whose default hash function agrees with their equality (equal values hash
alike) and which :func:`group_hash` hashes as values: ``1.0`` and ``1.00`` of a NUMERIC, ``-0``
and ``0`` of a float, ``'a'`` and ``'a '`` of a ``bpchar``, ``'1 day'`` and ``'24 hours'`` of an
interval are one group to ``GROUP BY`` and one group to the hash. (Their texts differ: a hash of
the text would split one group into several, each keeping R rows.) Types outside this list are
hashed as their text: every type a private key can have whose equal values print differently is
in it (``timetz``, ``jsonb`` are refused as keys the query selects, nondeterministic collations
as keys)."""


def group_hash(
    salt: str, unit: exp.Expr, gcols: Sequence[exp.Expr], hashed: Collection[int] = ()
) -> exp.Expr:
    """A salted 64-bit hash of (unit, group keys): the order in which a unit's groups are kept.

    The keys ``hashed`` (indexes into ``gcols``, of a type in :data:`HASHED_TYPES`: the engine's
    type probe, ``Analysis.hashed_keys``) are hashed as values, seeded with the hash of the salt,
    the unit and the other keys' texts (``hash_record_extended(ROW(keys), seed)``: equal values
    hash alike whatever they print as); the others as text, NULL and the text 'n' apart (keys
    are prefixed with 'v'). Ties (a collision) are broken by the keys themselves where it is
    used.
    """
    parts: list[exp.Expr] = [exp.Literal.string(salt), exp.cast(unit.copy(), "text")]
    for i, g in enumerate(gcols):
        if i in hashed:
            continue
        text = exp.DPipe(this=exp.Literal.string("v"), expression=exp.cast(g.copy(), "text"))
        parts.append(exp.Coalesce(this=text, expressions=[exp.Literal.string("n")]))
    digest = exp.Anonymous(this="concat_ws", expressions=[exp.Literal.string("|"), *parts])
    h = exp.Anonymous(this="hashtextextended", expressions=[digest, exp.Literal.number(0)])
    typed = [g.copy() for i, g in enumerate(gcols) if i in hashed]
    if not typed:
        return h
    return exp.Anonymous(
        this="hash_record_extended", expressions=[exp.Anonymous(this="ROW", expressions=typed), h]
    )


def value_order(seed: exp.Expr, values: Sequence[exp.Expr]) -> list[exp.Ordered]:
    """``ORDER BY hash_record_extended(ROW(CAST(values AS NUMERIC)), seed), values``: a salted
    order of the rows of one (unit, group) by their values, total on distinct values, for
    NUMERIC or integer values (``seed``: the group's :func:`group_hash`, a function of the salt,
    the unit and its keys, so each unit and group draws its own order). Cheaper than
    :func:`row_order` (no text of the row, no text hash) for rows whose measures read nothing
    but the values' equality classes (a quantile's bucket of its clamped NUMERIC or integer).
    Hashed as NUMERIC (a no-op for a NUMERIC), so an integer clamped in integers
    (``Analysis.integer_values``) is ordered as the same value clamped in NUMERIC: the same
    rows are kept, the same cells returned."""
    row = exp.Anonymous(this="ROW", expressions=[exp.cast(v.copy(), "numeric") for v in values])
    h = exp.Anonymous(this="hash_record_extended", expressions=[row, seed.copy()])
    return [exp.Ordered(this=h), *[exp.Ordered(this=v.copy()) for v in values]]


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
