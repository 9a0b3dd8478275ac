"""What ``dpsql serve`` checks before it listens: the policy against the upstream's catalog, the
upstream role's privileges, and the ledger's database; on a Citus coordinator, the tables'
placement (``dpsql check``'s warnings, :func:`dpsql.check.citus_findings`: not fatal). One line
per problem, in the operator's terms, each saying what to do (docs/deploy.md); no traceback.

Read through ``pg_catalog`` (``to_regclass``, ``pg_attribute``, ``has_*_privilege``), not
``information_schema``, which hides what the connecting role may not read: a table the role lacks
SELECT on must be reported as such, not as missing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import sql

from dpsql.check import citus_findings, did_you_mean, keys_from_refs
from dpsql.policy.model import Policy

# policy type family -> format_type() names that agree ("enum": any enum type)
AGREE: dict[str, frozenset[str]] = {
    "integer": frozenset({"integer", "bigint", "smallint"}),
    "numeric": frozenset({"numeric", "real", "double precision", "integer", "bigint", "smallint"}),
    "boolean": frozenset({"boolean"}),
    "text": frozenset({"text", "character varying", "character", "uuid", "enum", "citext"}),
    "date": frozenset({"date"}),
    "timestamp": frozenset({"timestamp without time zone", "timestamp with time zone"}),
}
# a float column must be declared as one (any of these names)
FLOAT_NAMES = frozenset({"real", "float", "float4", "float8", "double", "double precision"})
WRITE_PRIVILEGES = ("INSERT", "UPDATE", "DELETE", "TRUNCATE")

_COLUMNS = """
SELECT a.attname,
       CASE WHEN t.typtype = 'e' THEN 'enum'
            ELSE regexp_replace(format_type(a.atttypid, NULL), '\\(.*\\)', '') END,
       has_column_privilege(a.attrelid, a.attnum, 'SELECT')
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
"""


@dataclass(frozen=True)
class Problem:
    """One finding: ``fatal`` ones stop ``dpsql serve``; the others are logged as warnings."""

    text: str
    fatal: bool = True


def upstream_problems(policy: Policy, dsn: str) -> list[Problem]:
    """The policy's tables and columns against the upstream, as its role sees them."""
    out: list[Problem] = []
    with psycopg.connect(dsn, connect_timeout=10, autocommit=True) as conn:
        role, superuser = conn.execute(
            "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone() or ("?", False)
        if superuser:
            out.append(Problem(f'the upstream role "{role}" is a superuser: dpsql needs only '
                               "SELECT on the policy's tables (docs/deploy.md)", fatal=False))  # fmt: skip
        for name in (*policy.tables, *policy.public_tables):
            out += _table_problems(conn, policy, name, str(role))
        for user, table, col in keys_from_refs(policy):
            found = conn.execute("SELECT to_regclass(%s)::oid", [table]).fetchone()
            if found is None or found[0] is None:
                continue  # said above: the public table does not exist
            cols = [str(r[0]) for r in conn.execute(_COLUMNS, [found[0]]).fetchall()]
            if col not in cols:
                out.append(Problem(f"column {table}.{col} named in the policy (the keys_from of "
                                   f"{user}) does not exist upstream{did_you_mean(col, cols)}"))  # fmt: skip
        out += _fallible_tables(conn, policy)
        # on a Citus coordinator: tables placed so that per-unit work can't run on the workers
        out += [
            Problem(f"{f.table}: {f.problem}", fatal=False) for f in citus_findings(policy, conn)
        ]
    return out


def _fallible_tables(conn: psycopg.Connection[tuple[object, ...]], policy: Policy) -> list[Problem]:
    """The policy's tables whose reading computes something that can fail on some of their rows
    (:mod:`dpsql.sql.public_views`): warnings. A public one is refused in private statements,
    one by one; a private one (a view of a per-person table) fails a statement on a person's
    row, which stays charged but tells whether such a row was read."""
    from dpsql.sql.public_views import fallible_words
    from dpsql.sql.shadowing import SHADOW_SQL, Shadows

    out: list[Problem] = []
    for private, names in ((False, list(policy.public_tables)), (True, list(policy.tables))):
        if not names:
            continue
        rows = conn.execute(SHADOW_SQL, [names]).fetchall()
        got = Shadows.from_rows(
            [(str(k), str(n), None if d is None else str(d)) for k, n, d in rows], set(names)
        )
        out += [Problem(fallible_words(n, why, private), fatal=False) for n, why in got.fallible]
    return out


def _table_problems(
    conn: psycopg.Connection[tuple[object, ...]], policy: Policy, name: str, role: str
) -> list[Problem]:
    found = conn.execute("SELECT to_regclass(%s)::oid", [name]).fetchone()
    if found is None or found[0] is None:
        names = conn.execute(
            "SELECT n.nspname || '.' || c.relname FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN "
            "('r', 'p', 'v', 'm', 'f') AND n.nspname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        guess = did_you_mean(name, [str(r[0]) for r in names])
        return [Problem(f"table {name} named in the policy does not exist upstream{guess}")]
    oid = found[0]
    out: list[Problem] = []
    readable = conn.execute("SELECT has_table_privilege(%s, 'SELECT')", [oid]).fetchone()
    columns = {str(r[0]): (str(r[1]), bool(r[2])) for r in conn.execute(_COLUMNS, [oid]).fetchall()}
    declared = policy.tables[name].columns if name in policy.tables else None
    if not (readable and readable[0]):
        wanted = list(declared) if declared is not None else list(columns)
        denied = [c for c in wanted if c in columns and not columns[c][1]]
        if denied:
            out.append(Problem(f'the upstream role "{role}" may not read {name} '
                               f"({', '.join(denied)}): GRANT SELECT ON {name} TO {role}"))  # fmt: skip
    for privilege in WRITE_PRIVILEGES:
        q = sql.SQL("SELECT has_table_privilege(%s, {})").format(sql.Literal(privilege))
        row = conn.execute(q, [oid]).fetchone()
        if row and row[0]:
            out.append(Problem(f'the upstream role "{role}" has {privilege} on {name}: dpsql '
                               "needs only SELECT (use a read-only role)", fatal=False))  # fmt: skip
            break
    if declared is None:
        return out
    for cname, col in declared.items():
        got = columns.get(cname)
        if got is None:
            out.append(
                Problem(f"column {name}.{cname} named in the policy does not exist upstream")
            )
        elif got[0] not in AGREE[col.family]:
            out.append(Problem(f"column {name}.{cname}: the policy says {col.type}, the "
                               f"database has {got[0]}"))  # fmt: skip
        elif words := col.width_mismatch(got[0]):
            out.append(Problem(f"column {name}.{cname}: the policy says {col.type}, the "
                               f"database has {got[0]}: {words}"))  # fmt: skip
        elif got[0] in ("real", "double precision") and col.type not in FLOAT_NAMES:
            # the rewrite keeps a NUMERIC that meets a float within the float's range only
            # where it knows the column is one (dpsql.sql.rewrite.float_safe): declared
            # numeric, amount * 1e307 > col failed for the rows with amount above 18, a
            # binary search on one person's value (review21)
            out.append(Problem(f"column {name}.{cname}: the policy says {col.type}, the "
                               f"database has {got[0]}: write type: {got[0]} (comparisons "
                               "with a float column are made safe only where the policy "
                               "says it is one)"))  # fmt: skip
    return out


def ledger_problems(dsn: str, schema: str = "dpsql") -> list[Problem]:
    """Whether the ledger's role can keep the ledger: its schema exists and is the role's, or the
    role may create it; plpgsql is available (the ledger's append-only triggers use it)."""
    out: list[Problem] = []
    with psycopg.connect(dsn, connect_timeout=10, autocommit=True) as conn:
        role = str((conn.execute("SELECT current_user").fetchone() or ("?",))[0])
        db = str((conn.execute("SELECT current_database()").fetchone() or ("?",))[0])
        owner = conn.execute(
            "SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = %s", [schema]
        ).fetchone()
        if owner is None:
            can = conn.execute("SELECT has_database_privilege(current_database(), 'CREATE')")
            if not (can.fetchone() or (False,))[0]:
                out.append(Problem(
                    f'the ledger role "{role}" may not create the ledger schema "{schema}" in '
                    f'database "{db}": CREATE SCHEMA {schema} AUTHORIZATION {role} (as an admin), '
                    "or give --ledger a database the ledger role owns (docs/deploy.md)"))  # fmt: skip
        elif owner[0] != role:
            usable = conn.execute(
                "SELECT has_schema_privilege(%s, 'CREATE') AND has_schema_privilege(%s, 'USAGE')",
                [schema, schema],
            ).fetchone()
            if not (usable and usable[0]):
                out.append(Problem(
                    f'the ledger schema "{schema}" in database "{db}" belongs to "{owner[0]}", '
                    f'not to the ledger role "{role}": ALTER SCHEMA {schema} OWNER TO {role}'))  # fmt: skip
        lang = conn.execute("SELECT 1 FROM pg_language WHERE lanname = 'plpgsql'").fetchone()
        if lang is None:
            out.append(Problem(f'the ledger database "{db}" has no plpgsql: CREATE EXTENSION '
                               "plpgsql (the ledger's append-only triggers need it)"))  # fmt: skip
    return out


def startup_problems(policy: Policy, upstream: str, ledger: str | None) -> list[Problem]:
    """Everything :func:`upstream_problems` and :func:`ledger_problems` find (``ledger``: the
    ledger's DSN, None without a ledger); a database that can't be reached is one problem."""
    out: list[Problem] = []
    checks: list[tuple[str, Callable[[], list[Problem]]]] = [
        ("the upstream", lambda: upstream_problems(policy, upstream)),
        ("the ledger database", lambda: ledger_problems(ledger) if ledger else []),
    ]
    for what, check in checks:
        try:
            out += check()
        except psycopg.Error as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            out.append(Problem(f"cannot check {what}: {first}"))
    return out
