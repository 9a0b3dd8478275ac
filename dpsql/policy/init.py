"""``dpsql init --upstream DSN``: a starting policy written from the database's catalog.

Every table of the chosen schemas becomes a private table, except small tables that other tables
reference (lookups: public, their values the keys of the referencing columns). Guesses, each
marked ``# REVIEW`` in the file:

* the privacy unit: the column referencing the most-referenced table (the "person" table: users,
  customers ...), that table's own primary key, else ``row``;
* identifiers: primary and foreign keys, unique columns, and names like email or phone;
* bounds from ``CHECK (col >= lo AND col <= hi)`` constraints (a column without them can be
  counted but not summed until bounds are written);
* keys from enum types, and ``keys_from`` for columns referencing a small public table.

The file is a start for the data owner, never a policy to serve unread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import psycopg

TYPES = {
    "smallint": "integer", "integer": "integer", "bigint": "integer",
    "numeric": "numeric", "real": "numeric", "double precision": "numeric",
    "boolean": "boolean", "text": "text", "character varying": "text", "character": "text",
    "uuid": "text", "citext": "text", "date": "date",
    "timestamp without time zone": "timestamp", "timestamp with time zone": "timestamp",
}  # fmt: skip
SMALL_TABLE = 1000  # rows: a referenced table this small is taken for a public lookup
_IDENTIFYING = re.compile(r"(e?mail|phone|ssn|name|address|ip|token|password)", re.I)
_BOUND = re.compile(r"\(?\(?(\w+) (>=|>|<=|<) \(?'?(-?[0-9.]+)'?(?:::\w+)?\)?\)?")


@dataclass
class ColumnInfo:
    name: str
    type: str  # format_type() without modifiers, or "enum"
    labels: tuple[str, ...] = ()
    nullable: bool = True
    unique: bool = False
    references: str | None = None  # schema.table.column


@dataclass
class TableInfo:
    name: str  # schema.table
    rows: float
    columns: list[ColumnInfo] = field(default_factory=list)
    primary_key: tuple[str, ...] = ()
    checks: list[str] = field(default_factory=list)


def read_catalog(dsn: str, schemas: tuple[str, ...]) -> list[TableInfo]:
    """The tables of ``schemas`` with their columns, keys and CHECK constraints."""
    with psycopg.connect(dsn, connect_timeout=10, autocommit=True) as conn:
        tables = {
            f"{ns}.{rel}": TableInfo(f"{ns}.{rel}", float(rows), [])
            for ns, rel, rows in conn.execute(
                "SELECT n.nspname, c.relname, greatest(c.reltuples, 0) FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE c.relkind IN ('r', 'p', 'v', 'm') AND n.nspname = ANY(%s)"
                " ORDER BY 1, 2",
                [list(schemas)],
            ).fetchall()
        }
        for t in tables.values():
            cols = conn.execute(
                "SELECT a.attname, CASE WHEN ty.typtype = 'e' THEN 'enum' ELSE regexp_replace("
                "format_type(a.atttypid, NULL), '\\(.*\\)', '') END, NOT a.attnotnull,"
                " CASE WHEN ty.typtype = 'e' THEN ARRAY(SELECT enumlabel::text FROM pg_enum"
                " WHERE enumtypid = ty.oid ORDER BY enumsortorder) END"
                " FROM pg_attribute a JOIN pg_type ty ON ty.oid = a.atttypid"
                " WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped"
                " ORDER BY a.attnum",
                [t.name],
            ).fetchall()
            t.columns = [ColumnInfo(n, str(ty), tuple(lab or ()), bool(nul))
                         for n, ty, nul, lab in cols]  # fmt: skip
            by_name = {c.name: c for c in t.columns}
            for kind, cols_, ref, definition in conn.execute(
                "SELECT con.contype, ARRAY(SELECT attname FROM pg_attribute WHERE attrelid ="
                " con.conrelid AND attnum = ANY(con.conkey)), CASE WHEN con.contype = 'f' THEN"
                " (SELECT n.nspname || '.' || c.relname || '.' || a.attname FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON"
                " a.attrelid = c.oid AND a.attnum = con.confkey[1] WHERE c.oid = con.confrelid)"
                " END, pg_get_constraintdef(con.oid) FROM pg_constraint con"
                " WHERE con.conrelid = %s::regclass",
                [t.name],
            ).fetchall():
                names = tuple(cols_ or ())
                if kind == "p":
                    t.primary_key = names
                elif kind == "u" and len(names) == 1:
                    by_name[names[0]].unique = True
                elif kind == "f" and len(names) == 1:
                    by_name[names[0]].references = ref
                elif kind == "c":
                    t.checks.append(str(definition))
    return list(tables.values())


def bounds_from_checks(column: str, checks: list[str]) -> tuple[float, float] | None:
    """``[lo, hi]`` when CHECK constraints bound ``column`` on both sides.

    >>> bounds_from_checks("age", ["CHECK (((age >= 0) AND (age <= 120)))"])
    (0.0, 120.0)
    >>> bounds_from_checks("amount", ["CHECK ((amount >= (0)::numeric))"]) is None
    True
    """
    lo = hi = None
    for check in checks:
        for col, op, value in _BOUND.findall(check):
            if col != column:
                continue
            if op in (">=", ">"):
                lo = float(value) if lo is None else max(lo, float(value))
            else:
                hi = float(value) if hi is None else min(hi, float(value))
    return (lo, hi) if lo is not None and hi is not None else None


def write_policy(tables: list[TableInfo], dataset: str) -> str:
    """The starting policy's YAML text (with ``# REVIEW`` comments)."""
    referenced: dict[str, int] = {}
    for t in tables:
        for c in t.columns:
            if c.references:
                target = c.references.rsplit(".", 1)[0]
                referenced[target] = referenced.get(target, 0) + 1
    by_name = {t.name: t for t in tables}
    lookups = {n for n in referenced if by_name.get(n) and by_name[n].rows <= SMALL_TABLE
               and not _has_person_column(by_name[n])}  # fmt: skip
    persons = sorted((n for n in referenced if n not in lookups), key=lambda n: -referenced[n])
    person = persons[0] if persons else None
    out = [
        "# A starting policy written by `dpsql init` from the database's catalog.",
        "# Every line marked REVIEW is a guess: check it before serving (docs/policy.md).",
        "version: 1",
        f"dataset: {dataset}",
        "",
        "defaults: {epsilon: 1.0, max_epsilon: 5.0, delta: 1.0e-6}",
        "",
        "tables:",
    ]
    for t in tables:
        if t.name in lookups:
            continue
        out += _table(t, person, lookups)
    out += ["", "public_tables:" + ("" if lookups else " []")]
    out += [f"  - {n}   # REVIEW: a small referenced table, read as it is" for n in sorted(lookups)]
    out += [
        "",
        "analysts:",
        "  analyst:   # REVIEW: one per person; `dpsql verifier NAME` prints a credential line",
        "    budget: {epsilon: 10, delta: 1.0e-5}",
        "",
    ]
    return "\n".join(out)


def _has_person_column(t: TableInfo) -> bool:
    return any(_IDENTIFYING.search(c.name) for c in t.columns)


def _table(t: TableInfo, person: str | None, lookups: set[str]) -> list[str]:
    unit, why = "row", "no column identifies a person: each row is one"
    for c in t.columns:
        if c.references and person and c.references.rsplit(".", 1)[0] == person:
            unit, why = c.name, f"references {person}, the most referenced table"
            break
    else:
        if t.name == person and len(t.primary_key) == 1:
            unit, why = t.primary_key[0], "the primary key of the most referenced table"
    out = [f"  {t.name}:", f"    privacy_unit: {unit}   # REVIEW: {why}",
           "    max_rows_per_unit: auto", "    max_groups_per_unit: auto", "    columns:"]  # fmt: skip
    for c in t.columns:
        family = "text" if c.type == "enum" else TYPES.get(c.type)
        if family is None:
            out.append(f"      # {c.name}: type {c.type} is not supported; left out")
            continue
        attrs, notes = [f"type: {family}"], []
        target = c.references.rsplit(".", 1)[0] if c.references else None
        if c.name == unit:
            attrs.append("identifier: true")
        elif c.type == "enum" and c.labels:
            attrs.append("keys: [" + ", ".join(_scalar(v) for v in c.labels) + "]")
            notes.append("keys: the enum's labels")
        elif target in lookups:
            attrs.append(f"keys_from: {c.references}")
            notes.append(f"keys: the values of {c.references}")
        elif (c.name in t.primary_key or c.references or c.unique
              or _IDENTIFYING.search(c.name)):  # fmt: skip
            attrs.append("identifier: true")
            notes.append("identifier: a key, unique or identifying name")
        elif family in ("integer", "numeric"):
            b = bounds_from_checks(c.name, t.checks)
            if b is not None:
                attrs.append(f"bounds: [{b[0]:g}, {b[1]:g}]")
                notes.append("bounds: from CHECK constraints")
            else:
                notes.append("no bounds: add bounds: [lo, hi] to sum or average it")
        line = f"      {c.name}: {{{', '.join(attrs)}}}"
        out.append(line + (f"   # REVIEW: {'; '.join(notes)}" if notes else ""))
    return out


def _scalar(v: str) -> str:
    return v if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_ -]*", v) and v not in ("yes", "no", "on", "off", "true", "false", "null") else repr(v)  # fmt: skip
