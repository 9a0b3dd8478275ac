"""``dpsql init --upstream DSN``: a starting policy written from the database's catalog.

Every table of the chosen schemas becomes a private table, except small tables (at most
:data:`SMALL_TABLE` rows) that other tables reference and that do not look like tables of people
(lookups: public, their values the keys of the referencing columns). A referenced table is one of
people when it has a personal column (email, phone, ssn, address ...; a lookup's ``name`` is not
one), a name like users or customers, or a referencing column named like ``user_id``. Guesses,
each marked ``# REVIEW`` in the file:

* the privacy unit: the column referencing the most-referenced table of people, that table's own
  primary key, else a column named like a person's id (``user_id``, ``customer_id``,
  ``patient_id``, ``account_id``, ``pid`` ...), else ``row``. A column referencing a lookup is a
  key, never the unit (a policy protecting regions protects no one);
* column types as PostgreSQL names them (``bigint`` stays ``bigint``);
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
    "smallint": ("smallint", "integer"), "integer": ("integer", "integer"),
    "bigint": ("bigint", "integer"), "numeric": ("numeric", "numeric"),
    "real": ("real", "numeric"), "double precision": ("double precision", "numeric"),
    "boolean": ("boolean", "boolean"), "text": ("text", "text"),
    "character varying": ("varchar", "text"), "character": ("char", "text"),
    "uuid": ("uuid", "text"), "citext": ("text", "text"), "date": ("date", "date"),
    "timestamp without time zone": ("timestamp", "timestamp"),
    "timestamp with time zone": ("timestamptz", "timestamp"),
}  # fmt: skip
"""PostgreSQL type -> (the policy's name for it, its family)."""
SMALL_TABLE = 1000  # rows: a referenced table this small is taken for a public lookup
_IDENTIFYING = re.compile(r"(e?mail|phone|ssn|name|address|ip|token|password)", re.I)
_PERSONAL = re.compile(r"(e?mail|phone|ssn|address|password|birth|first_?name|last_?name)", re.I)
"""Column names only a table of people has (a lookup's ``name`` or ``label`` is not one)."""
_PERSON_TABLE = re.compile(
    r"(^|_)(users?|persons?|people|customers?|patients?|accounts?|members?|clients?|employees?"
    r"|students?|subscribers?|individuals?|respondents?|households?)$", re.I)  # fmt: skip
_UNIT_NAME = re.compile(
    r"^(p|u)id$|^(user|person|customer|patient|account|member|client|employee|student"
    r"|subscriber|individual|respondent|household|people)_?(id|no|num|number|key)$", re.I)  # fmt: skip
"""Column names that identify a person: a privacy unit when no foreign key names one."""
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
                "SELECT n.nspname, c.relname, c.reltuples FROM pg_class c"
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
        referenced = {c.references.rsplit(".", 1)[0] for t in tables.values()
                      for c in t.columns if c.references}  # fmt: skip
        for name in sorted(referenced & tables.keys()):
            t = tables[name]
            if t.rows < 0:  # never analyzed: count, up to one row past a lookup's size
                row = conn.execute(
                    f"SELECT count(*) FROM (SELECT 1 FROM {_quoted(name)} LIMIT %s) s",
                    [SMALL_TABLE + 1],
                ).fetchone()
                t.rows = float(row[0]) if row else 0.0
        for t in tables.values():
            t.rows = max(t.rows, 0.0)
    return list(tables.values())


def _quoted(name: str) -> str:
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split(".", 1))


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
    people = {n for n in referenced if by_name.get(n) and _is_person_table(by_name[n], tables)}
    lookups = {n for n in referenced if by_name.get(n) and by_name[n].rows <= SMALL_TABLE
               and n not in people}  # fmt: skip
    persons = sorted(people, key=lambda n: (-referenced[n], n))
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


def _is_person_table(t: TableInfo, tables: list[TableInfo]) -> bool:
    """Whether a referenced table looks like one of people: a personal column (email, phone ...),
    a name like users or customers, or a referencing column named like user_id."""
    if any(_PERSONAL.search(c.name) for c in t.columns):
        return True
    if _PERSON_TABLE.search(t.name.rsplit(".", 1)[-1]):
        return True
    return any(c.references and c.references.rsplit(".", 1)[0] == t.name
               and _UNIT_NAME.match(c.name) for u in tables for c in u.columns)  # fmt: skip


def _unit(t: TableInfo, person: str | None, lookups: set[str]) -> tuple[str, str]:
    """The guessed privacy unit of ``t`` and why. A column referencing a lookup is a key, never
    the unit."""
    for c in t.columns:
        if c.references and person and c.references.rsplit(".", 1)[0] == person:
            return c.name, f"references {person}, the most referenced table of people"
    if t.name == person and len(t.primary_key) == 1:
        return t.primary_key[0], "the primary key of the most referenced table of people"
    for c in t.columns:
        if _UNIT_NAME.match(c.name) and not (c.references and c.references.rsplit(".", 1)[0]
                                             in lookups):  # fmt: skip
            return c.name, "its name says it identifies a person"
    return "row", "no column identifies a person: each row is one"


def _table(t: TableInfo, person: str | None, lookups: set[str]) -> list[str]:
    unit, why = _unit(t, person, lookups)
    out = [f"  {t.name}:", f"    privacy_unit: {unit}   # REVIEW: {why}",
           "    max_rows_per_unit: auto", "    max_groups_per_unit: auto", "    columns:"]  # fmt: skip
    for c in t.columns:
        typed = ("text", "text") if c.type == "enum" else TYPES.get(c.type)
        if typed is None:
            out.append(f"      # {c.name}: type {c.type} is not supported; left out")
            continue
        type_name, family = typed
        attrs, notes = [f"type: {type_name}"], []
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
