"""`dpsql check`: validate a policy file, and against the live catalog when given a DSN."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

import psycopg
from psycopg import sql
from rich.console import Console
from rich.table import Table

from dpsql.errors import PolicyError
from dpsql.policy import load_policy
from dpsql.policy.model import Policy, keys_from_table
from dpsql.policy.tables import PrivateTable
from dpsql.sql.wording import plural

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


@dataclass(frozen=True)
class Finding:
    table: str
    column: str
    problem: str
    warning: bool = False  # a deployment advice (yellow, exit status 0), not a mismatch


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


def range_findings(policy: Policy, dsn: str) -> list[Finding]:
    """Per private column with declared ``bounds``: how many rows lie below or above them (one
    scan of each private table). The data owner reading their own data, never a release: each
    such value counts as the nearest bound in every SUM, AVG, VARIANCE, STDDEV and quantile, and
    no interval includes what it has beyond it (docs/accuracy.md). A warning, not an error."""
    out: list[Finding] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, t in policy.tables.items():
            cols = [(c, col.bounds) for c, col in t.columns.items() if col.bounds is not None]
            if not cols:
                continue
            parts: list[sql.Composable] = []
            params: list[object] = []
            for c, (lo, hi) in cols:
                ident = sql.Identifier(c)
                parts += [
                    sql.SQL("count(*) FILTER (WHERE {} < %s)").format(ident),
                    sql.SQL("count(*) FILTER (WHERE {} > %s)").format(ident),
                ]
                params += [lo, hi]
            q = sql.SQL("SELECT {} FROM {}").format(
                sql.SQL(", ").join(parts), sql.Identifier(*name.split("."))
            )
            try:
                row = conn.execute(q, params).fetchone()
            except psycopg.Error as e:
                out.append(Finding(name, "", f"bounds not checked: {e}".strip(), warning=True))
                continue
            assert row is not None
            for i, (c, (lo, hi)) in enumerate(cols):
                below, above = int(row[2 * i]), int(row[2 * i + 1])
                if below or above:
                    out.append(Finding(name, c, _outside(below, above, lo, hi), warning=True))
    return out


def unit_rows_findings(policy: Policy, dsn: str) -> list[Finding]:
    """Per private table with a privacy unit: the most rows one unit has (one scan), against the
    declared ``max_rows_per_unit_total`` (units above it lose their rows beyond it in every
    per-group COUNT and SUM: a warning), or, where none is declared, what declaring it would
    give. The data owner reading their own data, never a release."""
    out: list[Finding] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, t in policy.tables.items():
            if t.row_privacy:
                continue
            n = t.max_rows_per_unit_total
            keyed = [c for c, col in t.columns.items() if col.keys is not None or col.keys_from]
            q = sql.SQL(
                "SELECT max(n), count(*) FILTER (WHERE n > %s){} FROM "
                "(SELECT count(*) AS n{} FROM {} GROUP BY {}) AS per_unit"
            ).format(
                sql.SQL("").join(
                    sql.SQL(", max(k{})").format(sql.SQL(str(i))) for i in range(len(keyed))
                ),
                sql.SQL("").join(
                    sql.SQL(", count(DISTINCT {}) AS k{}").format(
                        sql.Identifier(c), sql.SQL(str(i))
                    )
                    for i, c in enumerate(keyed)
                ),
                sql.Identifier(*name.split(".")),
                sql.Identifier(t.privacy_unit),
            )
            try:
                row = conn.execute(q, [n or 0]).fetchone()
            except psycopg.Error as e:
                out.append(Finding(name, "", f"rows per unit not read: {e}".strip(), warning=True))
                continue
            most, over = (int(row[0] or 0), int(row[1] or 0)) if row else (0, 0)
            unit = t.privacy_unit
            groups = {c: int(row[2 + i] or 0) for i, c in enumerate(keyed)} if row else {}
            out += _keyed_groups_finding(name, t, groups)
            if n is not None and over:
                out.append(
                    Finding(
                        name,
                        "",
                        f"{plural(over, unit + ' value')} have more rows than "
                        f"max_rows_per_unit_total ({n}; the most: {most:,}): per-group counts and "
                        "sums keep only that many of each. Raise it to what one person can "
                        "have (not from these rows: the policy is public)",
                        warning=True,
                    )
                )
            elif n is not None:
                out.append(Finding(name, "", f"every {unit} has at most {n} rows in all"))
            else:
                r, g = t.max_rows_per_unit, t.max_groups_per_unit
                both = isinstance(r, int) and isinstance(g, int)
                shape = (
                    f"with max_rows_per_unit {r} and max_groups_per_unit {g} declared, a "
                    f"per-group COUNT moves by up to {r * g:,} rows of one {unit} "  # type: ignore[operator]
                    "(R x G); "
                    if both
                    else ""
                )
                out.append(
                    Finding(
                        name,
                        "",
                        f"the most rows one {unit} has: {most:,}; {shape}max_rows_per_unit_total "
                        "(what one person can have in all, declared from what the table can "
                        "hold, not from these rows) caps what one adds over all groups instead, "
                        "and auto spends nothing choosing it (docs/policy.md)",
                        warning=True,
                    )
                )
    return out


def _keyed_groups_finding(name: str, t: PrivateTable, most: dict[str, int]) -> list[Finding]:
    """Where ``auto`` G takes a GROUP BY of declared keys as every key (each unit could be in
    all of them, as far as the public policy says: a per-group answer's noise sized for that)
    while each unit has far fewer values of the column: the data owner's max_groups_per_unit
    would size it for what one person can have (newcomer23 #5: pums by educ, 16 keys, each
    pid in one: 16x the noise). The owner reading their own data, never a release."""
    if not t.auto_groups:
        return []
    fewer: list[tuple[str, int, int]] = []
    for c, k in most.items():
        keys = t.columns[c].keys
        if keys is not None and 0 < k < len(keys):
            fewer.append((c, k, len(keys)))
    if not fewer:
        return []
    unit = t.privacy_unit
    worst = max(fewer, key=lambda f: f[2] / f[1])
    listed = ", ".join(f"{c} {k} of its {n} keys" for c, k, n in fewer)
    return [
        Finding(
            name,
            "",
            f"the most values of a keyed column one {unit} has: {listed}. Under "
            "max_groups_per_unit auto a GROUP BY of declared keys sizes its noise for one "
            f"{unit} in every key (GROUP BY {worst[0]}: {worst[2]} groups, {worst[2]}x the noise "
            f"of one), since the public policy does not say a {unit} has fewer. Declaring "
            "max_groups_per_unit as the most groups one person can have (from what a person "
            f"can have, not from these rows; here {max(k for _, k, _ in fewer)} for a GROUP BY "
            f"of one of these) sizes it for that, 1/{worst[2] // worst[1]} of it by "
            f"{worst[0]}; a GROUP BY a person has more groups in then keeps only that many of "
            "each person's (docs/policy.md)",
            warning=True,
        )
    ]


def _outside(below: int, above: int, lo: object, hi: object) -> str:
    """What the owner reads for a column with rows outside its declared bounds."""
    where = []
    if above:
        where.append(
            f"{plural(above, 'row')} above the declared {_bound(hi)} (they count as {_bound(hi)})"
        )
    if below:
        where.append(
            f"{plural(below, 'row')} below the declared {_bound(lo)} (they count as {_bound(lo)})"
        )
    return (
        f"{'; '.join(where)}: no answer's interval includes what they have beyond the bounds. "
        "Widen bounds from what the column can hold (not from these rows: the policy is "
        "public), or accept that those values are clamped"
    )


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
                f"{c}[{_bound(v.bounds[0])},{_bound(v.bounds[1])}]"
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
    for f in proof_findings(policy, upstream):
        style = "dim" if f.warning else "green"
        console.print(f"[{style}]{f.table}.{f.column}: {f.problem}[/{style}]", highlight=False)
    return 0


def proof_findings(policy: Policy, dsn: str) -> list[Finding]:
    """Per private table, its bounded columns whose values validated CHECK constraints prove
    inside the declared bounds (read unclamped: :mod:`dpsql.sql.check_bounds`), and those they
    don't (a note: such a constraint would make queries cheaper). Reads the catalog only."""
    from dpsql.execute.checked_bounds import checks_sql, proven_columns

    out: list[Finding] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, t in policy.tables.items():
            cols = tuple(
                sorted(c for c, col in t.columns.items() if col.bounds and not col.temporal)
            )
            if not cols:
                continue
            row = conn.execute(sql.SQL("SELECT ({})").format(checks_sql(name, cols))).fetchone()
            proven = proven_columns(t, cols, row[0] if row else None)
            for c in cols:
                col = t.columns[c]
                assert col.bounds is not None
                lo, hi = _bound(col.bounds[0]), _bound(col.bounds[1])
                if c in proven:
                    what = f"the catalog proves it in [{lo}, {hi}] (a CHECK constraint): read unclamped"
                else:
                    what = (
                        f"clamped into [{lo}, {hi}] in every query; a validated CHECK ({c} >= {lo} "
                        f"AND {c} <= {hi}) would make its queries cheaper (docs/policy.md)"
                    )
                out.append(Finding(name, c, what, warning=c not in proven))
    return out


def _bound(v: object) -> str:
    """A declared bound as written: a number in %g, a date or timestamp in ISO form."""
    return f"{v:g}" if isinstance(v, (int, float)) else str(v)
