"""`dpsql check`: validate a policy file, and against the live catalog when given a DSN.

Owns the command (:func:`check_policy`: the policy's summary, its deployment notes), the checks
of the policy against the catalog (:func:`catalog_findings`: tables, columns and their types,
``keys_from`` references) and against a Citus cluster's placement (:func:`citus_findings`, also
read by ``dpsql serve``'s start-up checks); the data owner's reads of the data itself
(:mod:`.data`) and what a finding is (:mod:`.finding`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

import psycopg
from rich.console import Console
from rich.table import Table

from dpsql.check.data import proof_findings, range_findings, unit_rows_findings
from dpsql.check.finding import Finding, bound_text
from dpsql.errors import PolicyError
from dpsql.policy import load_policy
from dpsql.policy.model import Policy, keys_from_table

# policy type family -> PostgreSQL data_type values (information_schema.columns) that agree
_AGREE = {
    "integer": {"integer", "bigint", "smallint"},
    "numeric": {"numeric", "real", "double precision", "integer", "bigint", "smallint"},
    "boolean": {"boolean"},
    "text": {"text", "character varying", "character", "uuid", "USER-DEFINED"},
    "date": {"date"},
    "timestamp": {"timestamp without time zone", "timestamp with time zone"},
}
# a float column must be declared as one (any of these names: dpsql.sql.rewrite.float_safe)
_FLOAT_NAMES = frozenset({"real", "float", "float4", "float8", "double", "double precision"})


CITUS_SQL = """
SELECT n.nspname || '.' || c.relname, p.partmethod,
       CASE WHEN p.partmethod = 'h' THEN column_to_column_name(p.logicalrelid, p.partkey) END,
       p.colocationid, p.repmodel
FROM pg_dist_partition p
JOIN pg_class c ON c.oid = p.logicalrelid JOIN pg_namespace n ON n.oid = c.relnamespace
"""


def citus_findings(policy: Policy, conn: psycopg.Connection[tuple[object, ...]]) -> list[Finding]:
    """On a Citus coordinator: private tables not distributed by their privacy unit (per-unit
    bounding then runs on the coordinator, after every row was pulled there), private tables
    distributed by their unit but not co-located (a join of two of them on the unit can't run on
    the workers), and public tables that are not reference tables (hash-distributed: a join with
    a private table repartitions; single-shard: it can't run on the workers; local: sent to the
    workers by each query, and refused in a correlated subquery; a reference table joins on
    every worker). Empty on plain PostgreSQL."""
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'").fetchone() is None:
        return []
    dist = {
        str(r[0]): (str(r[1]), r[2], r[3], str(r[4])) for r in conn.execute(CITUS_SQL).fetchall()
    }
    out: list[Finding] = []
    groups: dict[object, list[str]] = {}
    for name, t in policy.tables.items():
        if t.row_privacy:
            continue
        how = dist.get(name)
        hint = f"SELECT create_distributed_table('{name}', '{t.privacy_unit}')"
        if how is None:
            problem = "a local table on the Citus coordinator: its queries don't scale out"
        elif how[0] == "n" and how[3] == "t":
            problem = "a reference table: each query runs on one node, with every row"
        elif how[0] == "n":
            problem = "a single-shard table: each query runs on one node, with every row"
        elif how[0] != "h" or how[1] != t.privacy_unit:
            problem = (
                f"distributed by {how[1] or how[0]}, not by its privacy unit "
                f"{t.privacy_unit}: per-unit bounding runs on the coordinator"
            )
        else:
            groups.setdefault(how[2], []).append(name)
            continue
        out.append(Finding(name, "", f"{problem} ({hint})", warning=True))
    if len(groups) > 1:
        names = "; ".join(", ".join(v) for v in groups.values())
        out.append(
            Finding(
                "(private tables)",
                "",
                f"distributed by their units but not co-located ({names}): joins on the unit "
                "can't run on the workers (create_distributed_table(..., colocate_with => ...))",
                warning=True,
            )
        )
    for name in policy.public_tables:
        how = dist.get(name)
        fix = f"SELECT create_reference_table('{name}')"
        if how is not None and how[0] == "h":
            problem = (
                "a hash-distributed public table: joins with private tables repartition "
                f"(SELECT undistribute_table('{name}'); {fix})"
            )
        elif how is not None and how[0] == "n" and how[3] != "t":
            problem = (
                "a single-shard public table: a join with a private table can't run on the "
                f"workers (SELECT undistribute_table('{name}'); {fix})"
            )
        elif how is None and _exists(conn, name):
            problem = (
                "a local public table on the Citus coordinator: each private query joining it "
                "sends its rows to the workers, and Citus refuses a correlated subquery "
                f"(EXISTS, IN) over it ({fix})"
            )
        else:
            continue
        out.append(Finding(name, "", problem, warning=True))
    return out


def _exists(conn: psycopg.Connection[tuple[object, ...]], name: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
    return bool(row and row[0])


def catalog_findings(policy: Policy, dsn: str) -> list[Finding]:
    """Tables and columns that are missing or whose types disagree with the policy."""
    q = (
        "SELECT table_schema || '.' || table_name, column_name, data_type "
        "FROM information_schema.columns WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
    )
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(q).fetchall()
        citus = citus_findings(policy, conn)
    actual: dict[str, dict[str, str]] = {}
    for t, c, ty in rows:
        actual.setdefault(t, {})[c] = ty
    out: list[Finding] = []
    for name, t in policy.tables.items():
        cols = actual.get(name)
        if cols is None:
            out.append(Finding(name, "", "table does not exist upstream"))
            continue
        for cname, col in t.columns.items():
            ty = cols.get(cname)
            if ty is None:
                out.append(Finding(name, cname, "column does not exist upstream"))
            elif ty not in _AGREE[col.family]:
                out.append(Finding(name, cname, f"policy says {col.type}, database has {ty}"))
            elif words := col.width_mismatch(ty):
                out.append(
                    Finding(name, cname, f"policy says {col.type}, database has {ty}: {words}")
                )
            elif ty in ("real", "double precision") and col.type not in _FLOAT_NAMES:
                out.append(
                    Finding(
                        name,
                        cname,
                        f"policy says {col.type}, database has {ty}: write type: {ty} "
                        "(comparisons with a float column are made safe only where the policy "
                        "says it is one)",
                    )
                )
        undeclared = sorted(set(cols) - set(t.columns))
        if undeclared:
            out.append(
                Finding(
                    name, ", ".join(undeclared), "not declared: can't be queried (fine if intended)"
                )
            )
    for name in policy.public_tables:
        if name not in actual:
            out.append(
                Finding(
                    name, "", f"public table does not exist upstream{did_you_mean(name, actual)}"
                )
            )
    out += [
        Finding(
            table,
            col,
            f"column does not exist upstream{did_you_mean(col, cols)}: "
            f"it is the keys_from of {user}",
        )  # fmt: skip
        for user, table, col in keys_from_refs(policy)
        if (cols := actual.get(table)) is not None and col not in cols
    ]
    return out + citus


def keys_from_refs(policy: Policy) -> list[tuple[str, str, str]]:
    """Each ``keys_from``: (the private column, its keys table, the keys column)."""
    return [
        (f"{name}.{cname}", keys_from_table(c.keys_from), c.keys_from.rsplit(".", 1)[1])
        for name, t in policy.tables.items()
        for cname, c in t.columns.items()
        if c.keys_from
    ]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean x?)`` for the closest of ``known``, or nothing."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def deployment_notes(policy: Policy, console: Console) -> None:
    """The ``server:`` keys the file sets (secrets hidden), unset ``${VAR}``s, and padding."""
    from dpsql.policy.settings import SECRET_KEYS

    server = policy.server
    if server is not None:
        shown = [
            f"{k}={'(set)' if k in SECRET_KEYS else getattr(server, k)}"
            for k in sorted(server.model_fields_set)
            if getattr(server, k) is not None
        ]
        console.print(f"server: {', '.join(shown) or '(nothing set)'}")
        for msg in server.unresolved.values():  # fine if a flag or variable gives it at serve
            console.print(f"[yellow]{msg}: `dpsql serve` needs a flag or variable for it[/yellow]")
    t = policy.timing
    if t.enabled:
        parts = [f"at multiples of {t.quantum_ms} ms"] if t.quantum_ms else []
        parts += [f"not before {t.min_ms} ms"] if t.min_ms else []
        parts += [] if t.pad_repeats else ["free repeats at once"]
        console.print(f"timing: private answers {', '.join(parts)}")
        timeout = (server.statement_timeout_ms if server else None) or (
            policy.defaults.statement_timeout_ms
        )
        if t.min_ms and t.min_ms <= timeout:
            console.print(
                f"[yellow]timing.min_ms is not above the statement timeout ({timeout} ms): "
                "answers that take longer than min_ms show their quantum (docs/timing.md)[/yellow]"
            )
    else:
        console.print("timing: no padding (see docs/timing.md)")


def check_policy(path: str, upstream: str | None, console: Console) -> int:
    try:
        policy = load_policy(path)
    except PolicyError as e:
        console.print(f"[bold red]{e.message}[/bold red]")
        if e.detail:
            console.print(e.detail)
        return 1
    console.print(
        f"{path}: valid", highlight=False
    )  # its own line: a table title pads to the table's width
    t = Table()
    for h in (
        "table",
        "privacy unit",
        "rows/unit",
        "groups/unit",
        "rows/unit in all",
        "bounded",
        "keys",
        "identifiers",
    ):
        t.add_column(h)
    for name, pt in policy.tables.items():
        t.add_row(
            name,
            pt.privacy_unit,
            str(pt.max_rows_per_unit),
            str(pt.max_groups_per_unit),
            str(pt.max_rows_per_unit_total or ""),
            ", ".join(
                f"{c}[{bound_text(v.bounds[0])},{bound_text(v.bounds[1])}]"
                for c, v in pt.columns.items()
                if v.bounds
            ),
            ", ".join(c for c, v in pt.columns.items() if v.keys or v.keys_from),
            ", ".join(c for c, v in pt.columns.items() if v.identifier),
        )
    for name in policy.public_tables:
        t.add_row(name, "(public)", "", "", "", "", "", "")
    console.print(t)
    console.print(f"analysts: {', '.join(policy.analysts) or '(none)'}")
    for name, analyst in policy.analysts.items():
        if analyst.restricted:  # tables:/deny: (names that match no table fail loading)
            view = policy.for_analyst(name)
            usable = ", ".join([*view.tables, *view.public_tables]) or "(no table)"
            console.print(f"  {name} may use: {usable}")
    deployment_notes(policy, console)
    if not upstream:
        return 0
    findings = catalog_findings(policy, upstream)
    errors = [f for f in findings if "fine if intended" not in f.problem and not f.warning]
    for f in findings:
        style = "red" if f in errors else "yellow"
        console.print(
            f"[{style}]{f.table}{'.' + f.column if f.column else ''}: {f.problem}[/{style}]"
        )
    if not findings:
        console.print("[green]the catalog agrees with the policy[/green]")
    if errors:  # a missing table or column: its bounds can't be read
        return 1
    ranges = range_findings(policy, upstream)
    for f in ranges:
        where = f"{f.table}.{f.column}" if f.column else f.table
        console.print(f"[yellow]{where}: {f.problem}[/yellow]", highlight=False)
    if not ranges:
        console.print("[green]every bounded column's values lie in its declared bounds[/green]")
    for f in unit_rows_findings(policy, upstream):
        style = "yellow" if f.warning else "green"
        console.print(f"[{style}]{f.table}: {f.problem}[/{style}]", highlight=False)
    outside = frozenset((f.table, f.column) for f in ranges if f.column)
    for f in proof_findings(policy, upstream, outside):
        style = "dim" if f.warning else "green"
        console.print(f"[{style}]{f.table}.{f.column}: {f.problem}[/{style}]", highlight=False)
    return 0
