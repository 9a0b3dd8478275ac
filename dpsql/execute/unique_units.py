"""Whether the catalog proves one row per privacy unit, so contribution bounding can be skipped.

A private table whose privacy unit is its PRIMARY KEY, or a NOT NULL column with a UNIQUE index
of its own (valid, immediate, no predicate, no expression, the default operator class and the
column's own collation), holds exactly one row per unit: a unit
touches one group with one row, within any R >= 1 and G >= 1, so ranking rows and groups per unit
changes nothing and the bounded SQL is the plain aggregate over clamped values
(:func:`dpsql.sql.rewrite.bound_contributions.bound_contributions` with ``unique_unit``). The
sensitivity the plan states (G·R·c) still holds (fixed numbers are not tightened). Clamping still happens: a
value clamped narrower than declared (``clamp: auto``) loses mass, which the same SQL measures
for the interval (``_unique_dropped`` there); only rows and groups are never dropped.

The index must compare units as the bounded SQL does (``PARTITION BY`` the unit column: the
type's default operator class under the column's collation): a unique index ``(email COLLATE
"C")`` on a column whose collation is case-insensitive (nondeterministic) admits ``alice@x`` and
``ALICE@x``, which the bounded SQL counts as one unit with two rows.

Only for a query over that one table (a join can give a unit several rows). A plain table must
have no inheritance children (``SELECT`` from it reads theirs too, which its index does not
cover); a partitioned table's unique index spans its partitions. The catalog is read when the
statement is planned (:meth:`dpsql.engine.Engine.plan`: the plan then spends nothing on dropped
rows, and ``auto`` R and G are 1 for free) and again just before the private query runs
(:meth:`dpsql.engine.Engine.private_sql`) and once more just after it, before anything is released
(:func:`recheck`, :func:`still_unique`, :func:`still_proven`).

What is compared is the proof's identity, not a yes/no (:data:`UNIQUE_UNIT_SQL`): the oids of
the table and of the index that proves it, and the ``xmin`` of the catalog rows that carry what
the proof rests on (the table's ``pg_class`` row: its inheritance children; the index's
``pg_index`` row: valid, unique, immediate; the unit column's ``pg_attribute`` row: NOT NULL,
collation). Read in the plan's own catalog round trip (:func:`catalog_state`) and kept in the
analysis (:attr:`~dpsql.sql.analysis.Analysis.unique_proof_id`): the checks refuse the statement
(55000, "run the statement again"; nothing released) when the catalog shows no proof or another
one. Dropping the key or the NOT NULL waits for a running query to end (its lock conflicts with
the query's), so a change can only come between two of dpsql's statements; a change made there and undone before
the next check (drop the key, load a second row of a unit that the query then reads, delete it,
add the key back; or drop and set NOT NULL, or add and drop an inheritance child) leaves a new
oid or a new ``xmin`` behind, and is seen. ``VACUUM`` and ``ANALYZE`` leave the identity as it
is; DDL that writes the table's ``pg_class`` row (``TRUNCATE``, ``GRANT``, a CHECK constraint
added) in that window refuses the statement too.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NoReturn

from psycopg import sql as pgsql

from dpsql.execute import checked_bounds
from dpsql.sql import check_bounds
from dpsql.sql.analysis import Analysis

if TYPE_CHECKING:
    from dpsql.execute.backend import Backend, Rows

UNIQUE_UNIT_SQL = pgsql.SQL(
    """SELECT pg_catalog.string_agg(c.oid::pg_catalog.text || '.' || c.xmin::pg_catalog.text
    || '.' || a.xmin::pg_catalog.text || '.' || i.indexrelid::pg_catalog.text
    || '.' || i.xmin::pg_catalog.text, ';' ORDER BY i.indexrelid)
  FROM pg_catalog.pg_index i
  JOIN pg_catalog.pg_class c ON c.oid = i.indrelid
  JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
  JOIN pg_catalog.pg_opclass o ON o.oid = i.indclass[0]
  WHERE i.indrelid = pg_catalog.to_regclass({table}) AND i.indisunique AND i.indnkeyatts = 1
    AND i.indisvalid AND i.indimmediate AND i.indpred IS NULL AND i.indexprs IS NULL
    AND o.opcdefault AND i.indcollation[0] = a.attcollation
    AND a.attname = {column} AND a.attnotnull AND NOT a.attisdropped
    AND (c.relkind = 'p' OR (c.relkind = 'r' AND NOT c.relhassubclass))"""
)
"""The identity of the catalog's proof of one row per unit, as one text (NULL: no proof): for
each index that proves it, the table's oid and the ``xmin`` of its ``pg_class`` row, the
``xmin`` of the unit column's ``pg_attribute`` row, the index's oid and the ``xmin`` of its
``pg_index`` row. A row's ``xmin`` changes whenever the row is updated, so the text changes
when the index is dropped and created again (a new oid), when the unit column's NOT NULL is
dropped and set again (``attnotnull`` is a flag of the ``pg_attribute`` row), when the index is
made invalid and valid again, and when the table gains an inheritance child (``relhassubclass``)
and loses it again; ``VACUUM`` and ``ANALYZE`` update ``pg_class`` in place (its ``xmin``
stays), ``CREATE INDEX`` and ``REINDEX`` of another index leave it too. ``TRUNCATE``,
``CLUSTER``, ``VACUUM FULL`` and ``GRANT`` write a new ``pg_class`` row: a statement whose
plan took the proof before one of them, and that runs after it, is refused (55000: run it
again)."""


CATALOG_TOKEN_SQL = pgsql.SQL(
    """SELECT pg_catalog.string_agg(
  c.oid::text || '.' || c.xmin::text || '.' || c.relfilenode::text || '.' || (
    SELECT pg_catalog.string_agg(a.xmin::text, ',' ORDER BY a.attnum)
    FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid),
  ';' ORDER BY c.oid)
FROM pg_catalog.pg_class c WHERE c.oid = ANY (ARRAY[{tables}]::pg_catalog.oid[])"""
)
"""The catalog state of the tables a statement reads, as one text: each table's oid, the xmin
of its ``pg_class`` row and of its columns' ``pg_attribute`` rows (``ALTER TABLE ... ALTER
COLUMN ... TYPE``, ``ADD``/``DROP COLUMN`` and a rename write new ones) and its file. What the
engine memoizes from the catalog (the type probe's key and value types) is keyed by it."""


def tables(a: Analysis) -> tuple[str, ...]:
    """The tables ``a`` reads (its own, and those it joins)."""
    return tuple(sorted({a.table, *(t for _, t, _ in a.sources)}))


def _regclass(table: str) -> pgsql.Composable:
    name = ".".join('"' + part.replace('"', '""') + '"' for part in table.split(".", 1))
    return pgsql.SQL("pg_catalog.to_regclass({})::pg_catalog.oid").format(pgsql.Literal(name))


@dataclass(frozen=True)
class CatalogState:
    """What the engine reads of the catalog when it plans a statement (one round trip)."""

    unique_id: str  # what proves one row per unit (:data:`UNIQUE_UNIT_SQL`); '' when nothing
    token: str  # :data:`CATALOG_TOKEN_SQL`
    proven: tuple[str, ...]  # columns within their declared bounds (dpsql.sql.check_bounds)
    proof_id: str = ""  # what proved them (checked_bounds.proof_id): the constraints' oids

    @property
    def unique(self) -> bool:
        """One row per unit (:func:`unit_is_unique`)."""
        return bool(self.unique_id)


def catalog_state(backend: Backend, a: Analysis) -> CatalogState:
    """Whether the catalog proves one row per unit (:func:`unit_is_unique`), which columns'
    values it proves within their declared bounds (:mod:`dpsql.execute.checked_bounds`) and the
    catalog token of ``a``'s tables (:data:`CATALOG_TOKEN_SQL`), read in one round trip (a text
    that starts with :data:`CATALOG_STATE_PREFIX`)."""
    text, columns = _state_text(a)
    return _state(a, columns, backend.run(text, private=False).rows)


def catalog_state_probed(
    backend: Backend, a: Analysis, probe: str
) -> tuple[CatalogState, Rows | None]:
    """:func:`catalog_state`, read in the round trip of ``probe`` (a zero-row probe of the
    statement's private tables: :class:`dpsql.execute.group_keys.FirstProbe`), which runs
    first: its plan takes the tables' locks, held to the end of the message's transaction, so
    the catalog read after it sees the definitions it was planned with. The probe's rows, or
    None when PostgreSQL refused the message (the catalog is then read alone, and the probe is
    sent again where the statement needs its types, refused there as before)."""
    from dpsql.errors import DpsqlError

    text, columns = _state_text(a)
    try:
        got = backend.run(probe, private=True, then=text)
    except DpsqlError:
        return _state(a, columns, backend.run(text, private=False).rows), None
    return _state(a, columns, got.then or []), got


def _state_text(a: Analysis) -> tuple[str, tuple[str, ...]]:
    unique = (a.table, a.private.privacy_unit) if eligible(a) else None
    columns = check_bounds.candidates(a)
    checks = (a.table, columns) if columns else None
    return _state_sql(tables(a), unique, checks), columns


def _state(a: Analysis, columns: tuple[str, ...], rows: list[tuple[object, ...]]) -> CatalogState:
    if not rows:
        return CatalogState("", "", ())
    proven = checked_bounds.proven(a, columns, rows[0][2]) if columns else ()
    ids = checked_bounds.proof_id(rows[0][2]) if proven else ""
    return CatalogState(_identity(rows[0][1]), str(rows[0][0]), proven, ids)


def _identity(value: object) -> str:
    """The text of a :data:`UNIQUE_UNIT_SQL` read ('' for NULL: no proof)."""
    return value if isinstance(value, str) else ""


@functools.lru_cache(maxsize=1024)
def _state_sql(
    names: tuple[str, ...],
    unique: tuple[str, str] | None,
    checks: tuple[str, tuple[str, ...]] | None = None,
) -> str:
    """:func:`catalog_state`'s statement for tables ``names`` (and the proof of one row per
    ``unique`` = (table, unit), else NULL; the CHECK constraints of ``checks`` = (table,
    columns), else NULL), composed once per statement shape."""
    token = CATALOG_TOKEN_SQL.format(tables=pgsql.SQL(", ").join(map(_regclass, names)))
    proof = _unique_sql(*unique) if unique is not None else pgsql.SQL("SELECT NULL")
    bounds = checked_bounds.checks_sql(*checks) if checks else pgsql.SQL("SELECT NULL")
    return pgsql.SQL("SELECT ({}), ({}), ({})").format(token, proof, bounds).as_string(None)


CATALOG_STATE_PREFIX = "SELECT (" + CATALOG_TOKEN_SQL.as_string(None).split("{")[0]


@functools.lru_cache(maxsize=1024)
def _proof_sql(table: str, unit: str) -> str:
    return _unique_sql(table, unit).as_string(None)


def _unique_sql(table: str, unit: str) -> pgsql.Composed:
    name = ".".join('"' + part.replace('"', '""') + '"' for part in table.split(".", 1))
    return UNIQUE_UNIT_SQL.format(table=pgsql.Literal(name), column=pgsql.Literal(unit))


def eligible(a: Analysis) -> bool:
    """A query over one private table with a privacy unit (no join, not ``privacy_unit: row``),
    without grouping sets (each set's SQL is bounded: :mod:`dpsql.execute.grouping_sets`)."""
    return not a.private.row_privacy and len(a.sources) <= 1 and not a.joins and not a.grouping_sets


def unique_proof(backend: Backend, a: Analysis) -> str:
    """The identity of the catalog's proof that ``a``'s table has one row per privacy unit
    (:data:`UNIQUE_UNIT_SQL`), '' when it proves nothing."""
    if not eligible(a):
        return ""
    rows = backend.run(_proof_sql(a.table, a.private.privacy_unit), private=False).rows
    return _identity(rows[0][0]) if rows else ""


def unit_is_unique(backend: Backend, a: Analysis) -> bool:
    """True when the catalog proves that ``a``'s table has one row per privacy unit."""
    return bool(unique_proof(backend, a))


def still_unique(backend: Backend, a: Analysis, when: str) -> None:
    """Refuse (55000) a statement whose plan took the catalog's proof (``a.unique_unit``) when the
    catalog no longer shows that same proof (``a.unique_proof_id``; ``when``: what the
    statement was doing meanwhile). Read just before the private query runs and again just
    after it, before anything is released: a key dropped in between, even one created again
    (and its unit column's NOT NULL, and the table itself) since, has another identity."""
    # a per-unit derived table (one_row_per_unit) has one row per unit by construction
    if not a.unique_unit or a.one_row_per_unit:
        return
    if unique_proof(backend, a) != a.unique_proof_id or not a.unique_proof_id:
        _gone(a, when)


def _gone(a: Analysis, when: str) -> NoReturn:
    from dpsql.errors import ObjectNotInPrerequisiteState

    unit = a.private.privacy_unit
    raise ObjectNotInPrerequisiteState(
        f"the key of {a.table} that proved one row per {unit} was dropped or changed {when}",
        detail=(
            f"The statement was planned for one row per {unit} (a unique index on {unit}, "
            f"NOT NULL). That index, the NOT NULL of {unit} or the table is not the one it was "
            f"planned with: rows added meanwhile may give one {unit} several rows. Nothing was "
            "released."
        ),
        hint="run the statement again",
    )


@functools.lru_cache(maxsize=1024)
def _recheck_sql(
    unique: tuple[str, str] | None,
    checks: tuple[str, tuple[str, ...]] | None,
    names: tuple[str, ...] = (),
) -> str:
    proof = _unique_sql(*unique) if unique is not None else pgsql.SQL("SELECT true")
    bounds = checked_bounds.checks_sql(*checks) if checks else pgsql.SQL("SELECT NULL")
    token = (
        CATALOG_TOKEN_SQL.format(tables=pgsql.SQL(", ").join(map(_regclass, names)))
        if names
        else pgsql.SQL("SELECT NULL")
    )
    return pgsql.SQL("SELECT ({}), ({}), ({})").format(proof, bounds, token).as_string(None)


def keyed(a: Analysis) -> bool:
    """Whether what ``a`` releases depends on the catalog state its key checks read
    (:data:`CATALOG_TOKEN_SQL`): group keys, whose printed text and grouping follow the type
    and collation of their columns (:func:`dpsql.execute.precheck.precheck`: no text key under a
    nondeterministic collation; texts by key type), or public candidates compared as text."""
    return bool(a.group_keys) or any(m.kind in ("mode", "count_keys") for m in a.measures)


def recheck(
    backend: Backend,
    a: Analysis,
    when: str,
    token: str = "",
    rows: list[tuple[object, ...]] | None = None,
) -> Analysis:
    """The catalog's proofs the plan of ``a`` took, read again (one statement, none when it took
    none): a unique key gone, or not the plan's (:attr:`Analysis.unique_proof_id`), refuses the
    statement (55000, as :func:`still_unique`); a column no
    longer proven within its bounds (a CHECK constraint dropped, or replaced by a NOT VALID
    one) is dropped from ``a.proven_bounds``, so the SQL clamps it again. ``a`` itself when
    nothing changed (what is memoized for it stays in use). ``token``: the catalog token of
    ``a``'s tables (:data:`CATALOG_TOKEN_SQL`) its key checks were made under, read again in
    the same round trip (another one refuses the statement, 55000: :func:`_changed`).
    ``rows``: what :func:`recheck_sql` read, sent by the caller (with its private query, in
    the same round trip: :meth:`~dpsql.execute.backend.Backend.run`'s ``then``)."""
    text = recheck_sql(a, token)
    if text is None:
        return a
    need_unique = a.unique_unit and not a.one_row_per_unit
    if need_unique and not eligible(a):
        _gone(a, when)
    if rows is None:
        rows = backend.run(text, private=False).rows
    if need_unique and (not a.unique_proof_id or not rows or rows[0][0] != a.unique_proof_id):
        _gone(a, when)  # gone, or another proof than the plan's: dropped and made again since
    if token and (not rows or str(rows[0][2]) != token):  # read as catalog_state reads it
        _changed(a, when)
    value = rows[0][1] if rows else None
    now = checked_bounds.proven(a, a.proven_bounds, value)
    if now and a.proof_id and checked_bounds.proof_id(value) != a.proof_id:
        now = ()  # the same text, other constraints: dropped and added again since the plan
    return a if now == a.proven_bounds else replace(a, proven_bounds=now)


def recheck_sql(a: Analysis, token: str = "") -> str | None:
    """The statement :func:`recheck` reads (None: nothing to read again)."""
    need_unique = a.unique_unit and not a.one_row_per_unit
    if not need_unique and not a.proven_bounds and not token:
        return None
    unique = (a.table, a.private.privacy_unit) if need_unique and eligible(a) else None
    checks = (a.table, a.proven_bounds) if a.proven_bounds else None
    return _recheck_sql(unique, checks, tables(a) if token else ())


def _changed(a: Analysis, when: str) -> NoReturn:
    from dpsql.errors import ObjectNotInPrerequisiteState

    raise ObjectNotInPrerequisiteState(
        f"a column or the definition of {', '.join(tables(a))} was changed {when}",
        detail=(
            "The statement's group keys were checked against the columns' types and "
            "collations as they were when it was planned (a text key under a case-insensitive "
            "collation, for one, is refused). Nothing was released."
        ),
        hint="run the statement again",
    )


def still_proven(
    backend: Backend, a: Analysis, token: str = "", rows: list[tuple[object, ...]] | None = None
) -> None:
    """Refuse (55000) a statement whose private query ran with the catalog's proofs in ``a``
    (one row per unit; the values of ``a.proven_bounds`` within their bounds, unclamped) when
    the catalog no longer shows one of them (read after the query, before anything is
    released); and, given ``token`` (the catalog token its key checks were made under), when
    its tables' catalog state is another one: a column's collation or type changed between
    those checks and the query (a change made and undone leaves a new ``xmin``; one made while
    the query runs waits for it), in the same round trip. ``rows``: :func:`recheck`'s."""
    when = "while the statement ran"
    now = recheck(backend, a, when, token, rows).proven_bounds
    if now != a.proven_bounds:
        from dpsql.errors import ObjectNotInPrerequisiteState

        gone = ", ".join(c for c in a.proven_bounds if c not in now)
        raise ObjectNotInPrerequisiteState(
            f"the CHECK constraint of {a.table} that proved the declared bounds of {gone} was "
            f"dropped {when}",
            hint="run the statement again",
        )
