"""``dpsql check --upstream``'s reads of the data itself, by the data owner, never a release:
rows outside a column's declared bounds, the most rows (and keyed values) one unit has, and the
bounds the catalog's CHECK constraints prove.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from dpsql.check.finding import Finding, bound_text
from dpsql.policy.model import Policy
from dpsql.policy.tables import PrivateTable
from dpsql.sql.wording import plural


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
                out.append(Finding(name, "", f"every {unit} has at most {plural(n, 'row')} in all"))
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
            f"{plural(above, 'row')} above the declared {bound_text(hi)} (they count as {bound_text(hi)})"
        )
    if below:
        where.append(
            f"{plural(below, 'row')} below the declared {bound_text(lo)} (they count as {bound_text(lo)})"
        )
    return (
        f"{'; '.join(where)}: no answer's interval includes what they have beyond the bounds. "
        "Widen bounds from what the column can hold (not from these rows: the policy is "
        "public), or accept that those values are clamped"
    )


def proof_findings(
    policy: Policy, dsn: str, outside: frozenset[tuple[str, str]] = frozenset()
) -> list[Finding]:
    """Per private table, its bounded columns whose values validated CHECK constraints prove
    inside the declared bounds (read unclamped: :mod:`dpsql.sql.check_bounds`), and those they
    don't (a note: such a constraint would make queries cheaper, unless the column is in
    ``outside``, the (table, column) pairs :func:`range_findings` found rows outside the bounds
    of: that CHECK would not validate). Reads the catalog only."""
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
                lo, hi = bound_text(col.bounds[0]), bound_text(col.bounds[1])
                if c in proven:
                    what = f"the catalog proves it in [{lo}, {hi}] (a CHECK constraint): read unclamped"
                elif (name, c) in outside:
                    what = (
                        f"clamped into [{lo}, {hi}] in every query; rows lie outside these bounds "
                        f"(above), so a CHECK ({c} >= {lo} AND {c} <= {hi}), which would make its "
                        "queries cheaper, would not validate (docs/policy.md)"
                    )
                else:
                    what = (
                        f"clamped into [{lo}, {hi}] in every query; a validated CHECK ({c} >= {lo} "
                        f"AND {c} <= {hi}) would make its queries cheaper (docs/policy.md)"
                    )
                out.append(Finding(name, c, what, warning=c not in proven))
    return out
