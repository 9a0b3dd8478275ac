"""Contribution-bounded cell counts, computed inside PostgreSQL (one row per non-empty cell).

Two ways to bound what one privacy unit adds to the vector x of cell counts:

* ``per_cell`` (histograms), as the engine's GROUP BY does: a unit counts at most R =
  ``max_rows_per_unit`` rows in each cell and touches at most G = ``max_groups_per_unit`` cells
  (chosen at random by PostgreSQL per unit: the choice depends on nothing but the unit's own
  rows, which is all that bounding needs; it is not privacy noise). A
  unit then changes x by at most R in at most G cells: ||dx||_1 <= G R, ||dx||_2 <= sqrt(G) R.
* ``per_unit`` (synthetic data): a unit keeps at most R rows in all (a random choice made by
  PostgreSQL). Every marginal of x then moves by at most R in L1 and in L2.

With ``privacy_unit: row`` no bounding is needed (R = G = 1). A policy's ``auto`` bound (chosen
per query by the engine from the data) is refused here unless the release names a number
(``--rows-per-unit`` / ``--cells-per-unit``, :class:`dpsql.release.jobs.Job`) or the policy
declares the rows of one unit in all (``max_rows_per_unit_total``: :meth:`Bound._with_total`, a
histogram then counts at most that many rows of a unit over all its cells): a published count
must say what it counts, and R = 1 (the engine's default before ``auto``) counts people, not
rows (newcomer21 #29: the demo's sex x educ cells 88 "count" where the table has 216 rows). The
SQL is composed with
:mod:`psycopg.sql` (identifiers and literals quoted by psycopg), runs in a read-only transaction
with a statement timeout, and an upstream error keeps only its SQLSTATE class.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg import sql as pgsql

from dpsql.errors import InvalidParameter, QueryCanceled
from dpsql.errors.upstream import sanitized_upstream
from dpsql.release.spec import Source


@dataclass(frozen=True)
class Bound:
    """How contributions are bounded: ``mode`` is "per_cell" or "per_unit"."""

    mode: str
    rows: int  # R
    cells: int  # G (per_cell only; 1 for per_unit)

    @classmethod
    def for_source(cls, src: Source, mode: str) -> Bound:
        """The bounds of the table's policy (with the release's numbers for ``auto``).

        Raises:
            InvalidParameter: 22023, a bound the release needs is ``auto``.
        """
        p = src.private
        if p.row_privacy:
            return cls(mode, 1, 1)
        auto = ["max_rows_per_unit"] if p.max_rows_per_unit == "auto" else []
        if mode == "per_cell" and p.max_groups_per_unit == "auto":
            auto.append("max_groups_per_unit")
        n = p.max_rows_per_unit_total
        if auto and n is not None:
            return cls._with_total(src, mode, n)
        if auto:
            raise _auto_refused(src, auto)
        if mode == "per_cell":
            return cls(mode, p.rows_bound, min(p.groups_bound, src.cells))
        return cls(mode, p.rows_bound, 1)

    @classmethod
    def _with_total(cls, src: Source, mode: str, n: int) -> Bound:
        """The bounds of a table whose policy leaves R or G to ``auto`` and declares the rows
        of one unit in all, N (``max_rows_per_unit_total``): a published number, nothing to
        choose. A unit keeping at most N rows in all (``per_unit``) changes the cell vector by
        at most N in L1 and in L2, less than any R rows in each of G cells with R or G at most
        N (a unit with N rows has at most N in a cell and touches at most N cells) unless a
        declared R times the cells is smaller; the smaller is used."""
        p = src.private
        if mode == "per_unit" or p.max_rows_per_unit == "auto":
            return cls("per_unit", n, 1)
        g = min(n, src.cells)  # R declared, G auto: at most N cells (and the table's)
        return cls("per_unit", n, 1) if n <= p.rows_bound * g else cls(mode, p.rows_bound, g)


def _auto_refused(src: Source, auto: list[str]) -> InvalidParameter:
    unit = src.private.privacy_unit
    options = {
        "max_rows_per_unit": "--rows-per-unit R",
        "max_groups_per_unit": "--cells-per-unit G",
    }
    return InvalidParameter(
        f"{src.table} has {' and '.join(f'{a}: auto' for a in auto)} in the policy (chosen per "
        "query by the engine, from the data); a release is computed once and published, so it "
        "needs the number",
        detail=f"each {unit} counts at most R of its rows in a cell and in at most G cells: a "
        f"{unit} with more rows counts less, so the released counts are of rows kept that way "
        f"(R = 1 counts {unit} values, not rows)",
        hint=f"pass {' '.join(options[a] for a in auto)} (for instance the most rows one {unit} "
        "has in a cell, and the cells it spans; the noise grows with R x G), or declare the "
        f"numbers for {src.table} in the policy (max_rows_per_unit_total, the rows of one {unit} "
        "in all, is enough: each then counts at most that many rows over all cells)",
    )


def counted(src: Source, bound: Bound) -> str:
    """What a released count counts, in words (the CLI, the JSON sidecar)."""
    p = src.private
    if p.row_privacy:
        return f"rows of {src.table}"
    unit = p.privacy_unit
    rows = "1 row" if bound.rows == 1 else f"{bound.rows} rows"
    if bound.mode == "per_unit":
        return f"rows of {src.table}, at most {rows} of each {unit} (the others left out)"
    cells = "1 cell" if bound.cells == 1 else f"{bound.cells} cells"
    return (
        f"rows of {src.table}, at most {rows} of each {unit} in a cell and in at most {cells} "
        f"per {unit} (the others left out)"
    )


def _table(name: str) -> pgsql.Identifier:
    schema, table = name.split(".", 1)
    return pgsql.Identifier(schema, table)


def counts_sql(src: Source, bound: Bound) -> pgsql.Composed:
    """The SQL returning (c0, ..., ck, n) per non-empty cell after bounding."""
    k = len(src.axes)
    cs = [pgsql.Identifier(f"_c{i}") for i in range(k)]
    clist = pgsql.SQL(", ").join(cs)
    idx = [
        pgsql.SQL("{} AS {}").format(a.index_sql(), c) for a, c in zip(src.axes, cs, strict=True)
    ]
    p = src.private
    unit = [] if p.row_privacy else [pgsql.SQL("{} AS _u").format(pgsql.Identifier(p.privacy_unit))]
    rows = pgsql.SQL("SELECT {} FROM {}").format(
        pgsql.SQL(", ").join(unit + idx), _table(src.table)
    )
    notnull = pgsql.SQL(" AND ").join(pgsql.SQL("{} IS NOT NULL").format(c) for c in cs)
    if p.row_privacy:
        return pgsql.SQL(
            "WITH _r AS ({rows}) SELECT {c}, count(*)::bigint FROM _r WHERE {nn} GROUP BY {c}"
        ).format(rows=rows, c=clist, nn=notnull)
    if bound.mode == "per_unit":
        return pgsql.SQL(
            "WITH _r AS ({rows}), _b AS (SELECT {c}, ROW_NUMBER() OVER (PARTITION BY _u "
            "ORDER BY random()) AS _rn FROM _r WHERE {nn}) "
            "SELECT {c}, count(*)::bigint FROM _b WHERE _rn <= {r} GROUP BY {c}"
        ).format(rows=rows, c=clist, nn=notnull, r=pgsql.Literal(bound.rows))
    per_unit_cell = pgsql.SQL(
        "SELECT _u, {c}, LEAST(count(*), {r}) AS _n FROM _r WHERE {nn} GROUP BY _u, {c}"
    ).format(c=clist, r=pgsql.Literal(bound.rows), nn=notnull)
    if bound.cells >= src.cells:  # every unit may touch every cell: no choice to make
        return pgsql.SQL(
            "WITH _r AS ({rows}), _uc AS ({uc}) SELECT {c}, sum(_n)::bigint FROM _uc GROUP BY {c}"
        ).format(rows=rows, uc=per_unit_cell, c=clist)
    return pgsql.SQL(
        "WITH _r AS ({rows}), _uc AS ({uc}), _b AS (SELECT {c}, _n, ROW_NUMBER() OVER "
        "(PARTITION BY _u ORDER BY random()) AS _gr FROM _uc) "
        "SELECT {c}, sum(_n)::bigint FROM _b WHERE _gr <= {g} GROUP BY {c}"
    ).format(rows=rows, uc=per_unit_cell, c=clist, g=pgsql.Literal(bound.cells))


def bounded_cells(
    dsn: str, src: Source, bound: Bound, *, timeout_ms: int = 600_000
) -> tuple[np.ndarray, np.ndarray]:
    """The non-empty cells after bounding: an (n, k) int array of bin indices and their n counts.

    Private: never released raw; only noisy functions of it are.
    """
    query = counts_sql(src, bound)
    try:
        with psycopg.connect(dsn, autocommit=False) as conn:
            conn.read_only = True
            conn.execute(pgsql.SQL("SET statement_timeout = {}").format(pgsql.Literal(timeout_ms)))
            conn.execute("SET application_name = 'dpsql-release'")
            conn.execute("SET work_mem = '256MB'")  # in-memory hash aggregates over many units
            conn.execute("SET jit = off")
            rows = conn.execute(query).fetchall()
            conn.rollback()
    except psycopg.errors.QueryCanceled as e:
        raise QueryCanceled(
            "the release's counting query timed out",
            hint="release fewer columns or coarser bins, or raise statement_timeout_ms",
        ) from e
    except psycopg.Error as e:
        raise sanitized_upstream(e.sqlstate) from None
    k = len(src.axes)
    idx = np.array([r[:-1] for r in rows], dtype=np.int64).reshape(len(rows), k)
    n = np.array([r[-1] for r in rows], dtype=np.int64)
    return idx, n


def dense(src: Source, idx: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The sparse cells as a dense array of shape ``src.shape``."""
    out = np.zeros(src.shape, dtype=np.int64)
    np.add.at(out, tuple(idx.T), n)
    return out


def bounded_counts(dsn: str, src: Source, bound: Bound, *, timeout_ms: int = 600_000) -> np.ndarray:
    """The dense array (shape ``src.shape``) of bounded cell counts. Private: never released raw."""
    idx, n = bounded_cells(dsn, src, bound, timeout_ms=timeout_ms)
    return dense(src, idx, n)
