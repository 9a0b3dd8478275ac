"""Read from the catalog which columns' values validated CHECK constraints keep in their bounds.

The decision is :mod:`dpsql.sql.check_bounds`'s (pure); this module writes the catalog read and
hands its answer over. One read returns, as one ``jsonb`` value (a column of the engine's
catalog statement, :func:`dpsql.execute.unique_units.catalog_state`, so planning costs no extra
round trip):

* ``types``: the PostgreSQL type (``pg_type.typname``; a domain is its own name, which proves
  nothing) of each candidate column of the table;
* ``relations``: the table and every inheritance descendant (``pg_inherits``, recursively: a
  ``SELECT`` from a parent reads its children's rows, a partitioned table its partitions'), each
  as ``[relkind, [pg_get_constraintdef of each validated CHECK constraint of its own]]``. Each
  relation's rows are proven by its own constraints only: an inherited constraint has a copy
  in each child (``coninhcount``), a ``NO INHERIT`` one has none (it proves the parent's rows
  only), and a ``NOT VALID`` one (``convalidated`` false) proves nothing, as rows from before it
  may break it. A ``NO INHERIT`` constraint proves nothing either on a relation that has
  inheritance children (``relhassubclass``): a child attached to it needs no copy, so one
  attached and detached again between two of the engine's reads would leave no trace (a
  child attached to a relation with none sets ``relhassubclass``, which writes its row: below).

A table that is gone (dropped, renamed) reads as no relation: nothing is proven.

* ``ids``: the identity of what proved it, each relation's oid and the ``xmin`` of its
  ``pg_class`` row and the oids of its validated CHECK constraints (:func:`proof_id`). A
  constraint dropped and added again (or a relation swapped) has new oids, and a child added
  to a relation that had none (and dropped again) leaves a new ``xmin`` (``relhassubclass``;
  ``VACUUM`` and ``ANALYZE`` update the row in place and leave it), so a proof read after the
  private query that equals the one read before it in text, but not in identity, is not the
  same proof: rows loaded while it was gone may have been read unclamped
  (:func:`dpsql.execute.unique_units.recheck`). Not seen: a *foreign* table (whose CHECK
  constraints PostgreSQL does not enforce) attached as a child or partition of a relation that
  already has some, and detached again, between two reads: it leaves no row of the proof's
  relations changed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from psycopg import sql as pgsql

from dpsql.policy.tables import PrivateTable
from dpsql.sql import check_bounds
from dpsql.sql.analysis import Analysis

if TYPE_CHECKING:
    from dpsql.execute.backend import Backend

CHECKS_SQL = pgsql.SQL(
    """SELECT pg_catalog.jsonb_build_object(
  'types', (SELECT pg_catalog.jsonb_object_agg(a.attname, t.typname)
    FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
    WHERE a.attrelid = pg_catalog.to_regclass({table}) AND a.attnum > 0 AND NOT a.attisdropped
      AND a.attname::pg_catalog.text = ANY (ARRAY[{columns}]::pg_catalog.text[])),
  'relations', (WITH RECURSIVE tree(oid) AS (
      SELECT pg_catalog.to_regclass({table})::pg_catalog.oid
      UNION SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.oid)
    SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(c.relkind::pg_catalog.text, ARRAY(
        SELECT pg_catalog.pg_get_constraintdef(k.oid) FROM pg_catalog.pg_constraint k
        WHERE k.conrelid = c.oid AND k.contype = 'c' AND k.convalidated
          AND (NOT k.connoinherit OR NOT c.relhassubclass)
        ORDER BY k.conname)) ORDER BY c.oid)
    FROM tree JOIN pg_catalog.pg_class c ON c.oid = tree.oid),
  'ids', (WITH RECURSIVE tree(oid) AS (
      SELECT pg_catalog.to_regclass({table})::pg_catalog.oid
      UNION SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.oid)
    SELECT pg_catalog.string_agg(c.oid::pg_catalog.text || '.' || c.xmin::pg_catalog.text
      || ':' || COALESCE((
        SELECT pg_catalog.string_agg(k.oid::pg_catalog.text, ',' ORDER BY k.oid)
        FROM pg_catalog.pg_constraint k
        WHERE k.conrelid = c.oid AND k.contype = 'c' AND k.convalidated), ''),
      ';' ORDER BY c.oid)
    FROM tree JOIN pg_catalog.pg_class c ON c.oid = tree.oid))"""
)


def _quoted(table: str) -> str:
    return ".".join('"' + part.replace('"', '""') + '"' for part in table.split(".", 1))


def checks_sql(table: str, columns: tuple[str, ...]) -> pgsql.Composed:
    """:data:`CHECKS_SQL` for ``columns`` of ``table`` (schema.table)."""
    return CHECKS_SQL.format(
        table=pgsql.Literal(_quoted(table)),
        columns=pgsql.SQL(", ").join(pgsql.Literal(c) for c in columns),
    )


def proven(a: Analysis, columns: tuple[str, ...], value: object) -> tuple[str, ...]:
    """Of ``columns``, those the catalog read ``value`` (:data:`CHECKS_SQL`'s, decoded) proves
    within their declared bounds in ``a``'s table."""
    return proven_columns(a.private, columns, value)


def proven_columns(
    private: PrivateTable, columns: tuple[str, ...], value: object
) -> tuple[str, ...]:
    """:func:`proven` for the policy table ``private`` (``dpsql check --upstream`` too)."""
    if isinstance(value, str):  # a connection that loads jsonb as text
        value = json.loads(value)
    if not columns or not isinstance(value, Mapping):
        return ()
    types = value.get("types") or {}
    relations = value.get("relations") or []
    if not isinstance(types, Mapping) or not isinstance(relations, list):
        return ()
    rels: list[tuple[str, tuple[str, ...]]] = []
    for r in relations:
        if not (isinstance(r, list) and len(r) == 2 and isinstance(r[1], list)):
            return ()
        rels.append((str(r[0]), tuple(str(d) for d in r[1])))
    declared = {}
    for c in columns:
        col = private.columns.get(c)
        if col is not None and col.bounds is not None and not col.temporal:
            declared[c] = (col.lo, col.hi)
    return check_bounds.proven(columns, declared, {str(k): str(v) for k, v in types.items()}, rels)


def proof_id(value: object) -> str:
    """The ``ids`` of a :data:`CHECKS_SQL` read (decoded or text): '' when there is none."""
    if isinstance(value, str):
        value = json.loads(value)
    ids = value.get("ids") if isinstance(value, Mapping) else None
    return ids if isinstance(ids, str) else ""


def read(backend: Backend, a: Analysis, columns: tuple[str, ...]) -> tuple[str, ...]:
    """Of ``columns`` of ``a``'s table, those the catalog proves within their declared bounds
    now (one statement)."""
    if not columns:
        return ()
    text = pgsql.SQL("SELECT ({})").format(checks_sql(a.table, columns)).as_string(None)
    rows = backend.run(text, private=False).rows
    return proven(a, columns, rows[0][0] if rows else None)
