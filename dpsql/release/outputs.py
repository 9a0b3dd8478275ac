"""Writing released data: CSV + Parquet (pyarrow), a JSON sidecar, a PNG plot, a PostgreSQL table.

Everything written here is already differentially private (or computed from DP outputs only);
the private counts never reach this module.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql as pgsql

from dpsql.errors import DuplicateTable, InvalidParameter, PrivacyViolation, UpstreamError
from dpsql.policy.model import Policy

_PG_TYPES = {
    "integer": "bigint",
    "numeric": "double precision",
    "boolean": "boolean",
    "text": "text",
    "date": "date",
    "timestamp": "timestamp",
}


@dataclass(frozen=True)
class OutColumn:
    """A column to write: name, dpsql type family, values."""

    name: str
    family: str
    values: Sequence[Any] | np.ndarray


def _arrow(columns: Sequence[OutColumn]) -> Any:
    import pyarrow as pa

    types = {"integer": pa.int64(), "numeric": pa.float64(), "boolean": pa.bool_()}
    arrays = []
    for c in columns:
        t = types.get(c.family, pa.string())
        vals = c.values.tolist() if isinstance(c.values, np.ndarray) else list(c.values)
        if t == pa.string():
            vals = [None if v is None else str(v) for v in vals]
        arrays.append(pa.array(vals, type=t))
    return pa.Table.from_arrays(arrays, names=[c.name for c in columns])


def write_table(out_dir: Path, stem: str, columns: Sequence[OutColumn]) -> list[Path]:
    """``stem.csv`` and ``stem.parquet`` in ``out_dir``; returns the paths."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    table = _arrow(columns)
    csv, parquet = out_dir / f"{stem}.csv", out_dir / f"{stem}.parquet"
    pacsv.write_csv(table, csv)
    pq.write_table(table, parquet)
    return [csv, parquet]


def write_json(path: Path, meta: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta, indent=2, default=_jsonable) + "\n")
    return path


def write_private_json(path: Path, meta: dict[str, Any]) -> Path:
    """A file readable by its owner only (0600), for reports computed on the real data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(meta, indent=2, default=_jsonable) + "\n")
    return path


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextmanager
def _figure(path: Path, *args: Any, **kwargs: Any) -> Iterator[tuple[Any, Any]]:
    """``plt.subplots(*args, **kwargs)``, saved to ``path`` when the body ends; always closed."""
    plt = _pyplot()
    fig, axes = plt.subplots(*args, **kwargs)
    try:
        yield fig, axes
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)


def plot_counts(
    path: Path,
    counts: np.ndarray,
    labels: Sequence[Sequence[str]],
    names: Sequence[str],
    title: str,
) -> Path:
    """A bar chart (one axis) or a heat map of the first two axes (summed over the others)."""
    with _figure(path, figsize=(9, 5)) as (fig, ax):
        if counts.ndim == 1:
            ax.bar(range(counts.size), counts, color="#3b6ea5")
            ax.set_xticks(range(counts.size), labels[0], rotation=60, ha="right", fontsize=7)
            ax.set_xlabel(names[0])
            ax.set_ylabel("count")
        else:
            two = counts.reshape(counts.shape[0], counts.shape[1], -1).sum(axis=2)
            im = ax.imshow(two, aspect="auto", cmap="viridis")
            ax.set_yticks(range(two.shape[0]), labels[0], fontsize=7)
            ax.set_xticks(range(two.shape[1]), labels[1], rotation=60, ha="right", fontsize=7)
            ax.set_ylabel(names[0])
            ax.set_xlabel(names[1])
            fig.colorbar(im, ax=ax, label="count")
        ax.set_title(title)
    return path


def plot_marginals(
    path: Path, marginals: Sequence[tuple[str, Sequence[str], np.ndarray]], title: str
) -> Path:
    """One small bar chart per column (for synthetic data: computed on the synthetic rows)."""
    n = max(1, len(marginals))
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    with _figure(path, rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False) as (fig, axes):
        for ax in axes.reshape(-1)[n:]:
            ax.axis("off")
        for ax, (name, labels, counts) in zip(axes.reshape(-1), marginals, strict=False):
            ax.bar(range(len(counts)), counts, color="#3b6ea5")
            ax.set_xticks(range(len(counts)), labels, rotation=60, ha="right", fontsize=6)
            ax.set_title(name, fontsize=9)
        fig.suptitle(title)
    return path


_PLAIN = re.compile(r"[a-z_][a-z0-9_$]*")
_UNQUOTED = re.compile(r"[A-Za-z_\u0080-\uffff][A-Za-z0-9_$\u0080-\uffff]*")


def parse_table_name(name: str) -> tuple[str, str]:
    """``[schema.]table`` read as PostgreSQL reads it: a part in double quotes is kept as written
    (``""`` is a quote), an unquoted part is folded to lower case; the schema defaults to public.

    >>> parse_table_name('"public"."Visits"'), parse_table_name("PUBLIC.visits")
    (('public', 'Visits'), ('public', 'visits'))

    Raises:
        ValueError: not one or two identifiers separated by a dot.
    """
    parts: list[str] = []
    i, s = 0, name.strip()
    while True:
        if s.startswith('"', i):
            j, part = i + 1, []
            while True:
                k = s.find('"', j)
                if k < 0:
                    raise ValueError(f"{name!r}: a double quote is not closed")
                part.append(s[j:k])
                if s.startswith('"', k + 1):
                    part.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            if not "".join(part):
                raise ValueError(f"{name!r}: a quoted name is empty")
            parts.append("".join(part))
        else:
            m = _UNQUOTED.match(s, i)
            if m is None:
                raise ValueError(f"{name!r} is not a table name")
            parts.append(m.group().lower())
            i = m.end()
        if i == len(s):
            break
        if s[i] != ".":
            raise ValueError(f"{name!r} is not a table name")
        i += 1
    if len(parts) > 2:
        raise ValueError(f"table name {name!r} must be table or schema.table")
    return ("public", parts[0]) if len(parts) == 1 else (parts[0], parts[1])


def _sql_name(part: str) -> str:
    return part if _PLAIN.fullmatch(part) else '"' + part.replace('"', '""') + '"'


def check_target(policy: Policy, name: str) -> str:
    """The qualified name of an output table (quoted where PostgreSQL needs quotes), refusing
    every table the policy names (private tables, public tables, keys_from's among them: a
    release written over one would replace data analysts read) and dpsql's own and system
    schemas."""
    try:
        schema, table = parse_table_name(name)
    except ValueError as e:
        raise InvalidParameter(
            f"--to-table {e}: nothing was charged",
            hint='name the output table schema.table (quote a part as in SQL: "My Schema".t)',
        ) from None
    q = f"{schema}.{table}"
    shown = f"{_sql_name(schema)}.{_sql_name(table)}"
    if policy.private_table(q) is not None:
        what = "a private table of the policy"
    elif policy.is_public(q):
        what = "a public table of the policy (analysts query it; keys_from reads one)"
    elif schema in ("dpsql", "information_schema") or schema.startswith("pg_"):
        what = f"in the schema {schema}, which belongs to dpsql or PostgreSQL"
    else:
        return shown
    raise PrivacyViolation(
        f"{shown} is {what}; a release can't be written over it: nothing was charged",
        hint="choose another --to-table name, e.g. releases.<name>",
    )


def _ddl(conn: psycopg.Connection[Any], schema: str, table: str, replace: bool, defs: Any) -> None:
    """CREATE SCHEMA IF NOT EXISTS, DROP TABLE IF EXISTS (``replace``), CREATE TABLE."""
    ident = pgsql.Identifier(schema, table)
    conn.execute(pgsql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(pgsql.Identifier(schema)))
    if replace:
        conn.execute(pgsql.SQL("DROP TABLE IF EXISTS {}").format(ident))
    conn.execute(pgsql.SQL("CREATE TABLE {} ({})").format(ident, defs))


def _table_error(name: str, e: psycopg.Error, after: str) -> UpstreamError:
    diag = e.diag
    return UpstreamError(
        f"the release table {name} can't be written: {diag.message_primary or e}{after}",
        detail=diag.message_detail,
        hint="pass --replace to replace a table, choose another --to-table name, or ask the "
        "upstream's admin for CREATE on the schema",
        sqlstate=e.sqlstate or "58000",
    )


def check_writable(dsn: str, name: str, *, replace: bool) -> None:
    """Refuse, before anything is charged, an output table that exists (without ``replace``)
    or that the upstream would not let this role create or replace: the same DDL as the write,
    rolled back (a failed write after the charge was charged for nothing)."""
    schema, table = parse_table_name(name)
    with psycopg.connect(dsn) as conn:
        conn.execute("SET LOCAL lock_timeout = '5s'")
        exists = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL",
            [pgsql.Identifier(schema, table).as_string(conn)],
        ).fetchone()
        if exists and exists[0] and not replace:
            raise DuplicateTable(
                f"table {name} already exists: nothing was charged",
                hint="pass --replace to replace it, or choose another --to-table name",
            )
        try:
            _ddl(conn, schema, table, replace, pgsql.SQL("_dpsql_write_check integer"))
        except psycopg.Error as e:
            raise _table_error(name, e, ": nothing was charged") from None
        finally:
            conn.rollback()


def write_pg_table(
    dsn: str, name: str, columns: Sequence[OutColumn], csv: Path, *, replace: bool
) -> None:
    """Create ``name`` ([schema.]table, as SQL writes it) and COPY the released CSV (written by
    :func:`write_table`), in one transaction: a failure leaves the upstream as it was.

    Raises:
        UpstreamError: PostgreSQL refused the write (its SQLSTATE and words).
    """
    schema, table = parse_table_name(name)
    ident = pgsql.Identifier(schema, table)
    defs = pgsql.SQL(", ").join(
        pgsql.SQL("{} {}").format(pgsql.Identifier(c.name), pgsql.SQL(_PG_TYPES[c.family]))
        for c in columns
    )
    names = pgsql.SQL(", ").join(pgsql.Identifier(c.name) for c in columns)
    try:
        with psycopg.connect(dsn) as conn:
            _ddl(conn, schema, table, replace, defs)
            copy = pgsql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv, HEADER true)")
            with (
                conn.cursor() as cur,
                cur.copy(copy.format(ident, names)) as cp,
                csv.open("rb") as f,
            ):
                while chunk := f.read(1 << 20):
                    cp.write(chunk)
    except psycopg.Error as e:
        raise _table_error(name, e, "") from None
