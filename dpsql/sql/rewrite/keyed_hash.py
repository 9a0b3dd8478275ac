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
ever read. The identity of a group is (unit, keys) with NULL and each value told apart; keys
and the unit of a type whose hash agrees with its equality (:data:`HASHED_TYPES`) are hashed as
values (:func:`value_hash`), not as text. A quantile's rows are ordered by their values' hash
(:func:`value_order`).

The salt is a fresh CSPRNG token per execution (:func:`dpsql.execute.private_sql.salted`); the
guarantee holds for every salt value, even one the analyst knew: the salt only keeps the choice
from favouring the same rows and groups in every statement.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlglot import exp

from dpsql.sql.nodes import cast

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


HASH_FUNCTIONS = {
    "int2": "hashint2extended", "int4": "hashint4extended", "int8": "hashint8extended",
    "oid": "hashoidextended", "numeric": "hash_numeric_extended",
    "float4": "hashfloat4extended", "float8": "hashfloat8extended",
    "text": "hashtextextended", "varchar": "hashtextextended", "bpchar": "hashbpcharextended",
    "name": "hashnameextended", "char": "hashcharextended", "time": "time_hash_extended",
    "timestamp": "timestamp_hash_extended", "interval": "interval_hash_extended",
    "uuid": "uuid_hash_extended",
}  # fmt: skip
"""Types of :data:`HASHED_TYPES` and the extended hash function of their hash operator class
that takes exactly that type (the others, ``bool``, ``date``, ``timestamptz``, are hashed through
``hash_record_extended``, which calls their own)."""


def value_hash(value: exp.Expr, type_name: str, seed: exp.Expr) -> exp.Expr:
    """``hash_record_extended(ROW(value), seed)``, for ``value`` of a type in
    :data:`HASHED_TYPES`: written ``COALESCE(<the type's extended hash>(value, seed), 0)`` for
    a type in :data:`HASH_FUNCTIONS`, the same number (the record hash of one column is its
    column's hash, 0 for NULL) without building a record per row (about 80 ms of CPU per
    million rows, as much as hashing the value itself)."""
    fn = HASH_FUNCTIONS.get(type_name)
    if fn is None:
        row = exp.Anonymous(this="ROW", expressions=[value.copy()])
        return exp.Anonymous(this="hash_record_extended", expressions=[row, seed.copy()])
    h = exp.Anonymous(this=fn, expressions=[value.copy(), seed.copy()])
    return exp.Coalesce(this=h, expressions=[exp.Literal.number(0)])


def group_hash(
    salt: str,
    unit: exp.Expr,
    gcols: Sequence[exp.Expr],
    hashed: Collection[int] = (),
    unit_type: str = "",
    key_types: Sequence[str] = (),
) -> exp.Expr:
    """A salted 64-bit hash of (unit, group keys): the order in which a unit's groups are kept.

    The unit, when its type ``unit_type`` (the engine's type probe, ``Analysis.unit_type``) is
    in :data:`HASHED_TYPES`, is hashed as a value (:func:`value_hash`), seeded with the hash of
    the salt and the other keys' texts; else as text, with the salt. The keys ``hashed``
    (indexes into ``gcols``, of a type in :data:`HASHED_TYPES`: ``Analysis.hashed_keys``) are
    hashed as values, seeded with that (``hash_record_extended(ROW(keys), seed)``: equal values
    hash alike whatever they print as); the others as text, NULL and the text 'n' apart (keys
    are prefixed with 'v'). Ties (a collision) are broken by the keys themselves where it is
    used. With nothing hashed as text the salt's hash, ``hashtextextended('<salt>', 0)``, is a
    constant PostgreSQL computes once when planning (``concat_ws`` is only stable: it would run
    per row, about 100 ms of CPU per million rows). One hashed key whose type (``key_types``,
    the types of ``hashed`` in order: ``Analysis.hashed_key_types``) has its own extended hash
    function is hashed by :func:`value_hash` instead of ``hash_record_extended``: the same
    number, without a record per row (a text key: 50-60 ms of CPU per million rows, twice
    per row in a quantile's ranking)."""
    as_value = unit_type in HASHED_TYPES
    parts: list[exp.Expr] = [] if as_value else [cast(unit.copy(), "text")]
    for i, g in enumerate(gcols):
        if i in hashed:
            continue
        text = exp.DPipe(this=exp.Literal.string("v"), expression=cast(g.copy(), "text"))
        parts.append(exp.Coalesce(this=text, expressions=[exp.Literal.string("n")]))
    digest: exp.Expr = exp.Literal.string(salt)
    if parts:
        digest = exp.Anonymous(
            this="concat_ws", expressions=[exp.Literal.string("|"), digest, *parts]
        )
    h: exp.Expr = exp.Anonymous(
        this="hashtextextended", expressions=[digest, exp.Literal.number(0)]
    )
    if as_value:
        h = value_hash(unit, unit_type, h)
    typed = [g.copy() for i, g in enumerate(gcols) if i in hashed]
    if not typed:
        return h
    if len(typed) == 1 and len(key_types) == 1 and key_types[0] in HASH_FUNCTIONS:
        return value_hash(typed[0], key_types[0], h)
    return exp.Anonymous(
        this="hash_record_extended", expressions=[exp.Anonymous(this="ROW", expressions=typed), h]
    )


def unit_hash(salt: str, unit: exp.Expr, unit_type: str = "") -> exp.Expr:
    """A salted 64-bit hash of the unit alone, in another domain than :func:`group_hash`'s (seed
    1, not 0): the offset of a unit's systematic rounding under an L1 cap
    (:func:`dpsql.sql.rewrite.bound_partials._apportioned`). The unit is hashed as a value when
    its type is in :data:`HASHED_TYPES` (seeded with ``hashtextextended('<salt>', 1)``, a
    constant PostgreSQL computes once), else as text with the salt."""
    one = exp.Literal.number(1)
    if unit_type in HASHED_TYPES:
        seed = exp.Anonymous(this="hashtextextended", expressions=[exp.Literal.string(salt), one])
        return value_hash(unit, unit_type, seed)
    digest = exp.Anonymous(
        this="concat_ws",
        expressions=[exp.Literal.string("|"), exp.Literal.string(salt), cast(unit.copy(), "text")],
    )
    return exp.Anonymous(this="hashtextextended", expressions=[digest, one.copy()])


def value_hash_order(seed: exp.Expr, values: Sequence[exp.Expr]) -> exp.Expr:
    """``hash_record_extended(ROW(CAST(values AS NUMERIC)), seed)``: the salted hash by which
    :func:`value_order` orders the rows of one (unit, group), for NUMERIC or integer values
    (``seed``: the group's :func:`group_hash`, a function of the salt, the unit and its keys, so
    each unit and group draws its own order). Hashed as NUMERIC (a no-op for a NUMERIC), so an
    integer clamped in integers (``Analysis.integer_values``) is ordered as the same value
    clamped in NUMERIC: the same rows are kept, the same cells returned. One value is hashed
    by :func:`value_hash` (the same number)."""
    cast_ = [cast(v.copy(), "numeric") for v in values]
    if len(cast_) == 1:
        return value_hash(cast_[0], "numeric", seed)
    row = exp.Anonymous(this="ROW", expressions=cast_)
    return exp.Anonymous(this="hash_record_extended", expressions=[row, seed.copy()])


def value_order(order: exp.Expr, ties: Sequence[exp.Expr]) -> list[exp.Ordered]:
    """``ORDER BY order, ties``: a salted order of the rows of one (unit, group) by their
    values' hash ``order`` (:func:`value_hash_order`), for rows whose measures read nothing but
    the values' equality classes (a quantile's bucket of its clamped NUMERIC or integer).
    ``ties`` (the values, or the buckets the measures read of them) break a hash collision: rows
    equal in ``order`` and ``ties`` are equal in everything the measures read, so which of them
    is kept changes nothing. Cheaper than :func:`row_order` (no text of the row, no text hash)."""
    return [exp.Ordered(this=order.copy()), *[exp.Ordered(this=t.copy()) for t in ties]]


ROW_ORDER_TYPES = frozenset({"int2", "int4", "int8", "bool", "date", "uuid", "text", "varchar"})
"""Types whose values :func:`typed_row_order` orders a unit's rows by: two values of one of
them that the order cannot tell apart (equal, and equal ``COLLATE "C"`` for a text: byte for
byte) are the same value, printed the same, so rows tied on the order are the same to every
measure. Not ``numeric`` (``1.0`` = ``1.00``), floats (``-0`` = ``0``), ``bpchar`` (trailing
spaces) or time types (a time zone's text)."""

_COLLATED = frozenset({"text", "varchar"})


def typed_row_order(seed: exp.Expr, values: Sequence[tuple[exp.Expr, str]]) -> exp.Expr:
    """A salted hash of a row's values (each of a type in :data:`ROW_ORDER_TYPES`, with it),
    :func:`value_hash` chained from ``seed`` (the group's :func:`group_hash`: a function of the
    salt, the unit and its keys, so each unit and group draws its own order): the order of the
    rows of one (unit, group) for measures that read nothing of a row but these values (COUNT of
    declared keys, COUNT(DISTINCT x), the mode), ties broken by :func:`typed_row_ties`. It
    replaces :func:`row_order`'s hash of the row's text with the salt (a text of the row and a
    concatenation per row: 200 -> 134 ms of backend CPU on the demo's COUNT(DISTINCT region) by
    category)."""
    h = seed.copy()
    for v, type_name in values:
        h = value_hash(v, type_name, h)
    return h


def typed_row_ties(values: Sequence[tuple[exp.Expr, str]]) -> list[exp.Expr]:
    """The values themselves, a text ``COLLATE "C"`` (byte order, whatever the column's
    collation: a nondeterministic one's equal values may differ in bytes): rows of one (unit,
    group) equal in :func:`typed_row_order` and in these are the same values."""
    out: list[exp.Expr] = []
    for v, type_name in values:
        out.append(
            exp.Collate(this=v.copy(), expression=exp.Identifier(this="C", quoted=True))
            if type_name in _COLLATED
            else v.copy()
        )
    return out


def row_identity(columns: list[exp.Expr]) -> exp.Expr:
    """``CAST(ROW(columns...) AS TEXT)``: a row's values as unambiguous text."""
    return cast(exp.Anonymous(this="ROW", expressions=[c.copy() for c in columns]), "text")


def row_order(salt: str, identity: exp.Expr) -> list[exp.Ordered]:
    """``ORDER BY hashtextextended(salt || '|' || identity, 0), identity``: a salted order of a
    unit's rows, total on distinct identities (the text breaks a hash collision)."""
    digest = exp.Anonymous(
        this="concat_ws",
        expressions=[exp.Literal.string("|"), exp.Literal.string(salt), identity.copy()],
    )
    h = exp.Anonymous(this="hashtextextended", expressions=[digest, exp.Literal.number(0)])
    return [exp.Ordered(this=h), exp.Ordered(this=identity.copy())]
