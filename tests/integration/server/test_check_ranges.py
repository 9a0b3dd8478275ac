"""``dpsql check POLICY --upstream DSN`` tells the data owner how many rows of each bounded
column lie outside its declared bounds (issue 16): the demo's 5 whales have 2,000 purchases of
250,000 to 1,250,000 against ``amount: bounds [0, 500]``. Exact counts (the owner reading their
own data with their own credentials, not a release); the server never runs it for an analyst.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from dpsql.check import check_policy
from dpsql.check.data import proof_findings, range_findings
from dpsql.demo import POLICY
from dpsql.policy import load_policy
from tests.policies import PolicyMaker, demo_table, private_table

WHALES = "public.purchases.amount: 2,000 rows above the declared 500 (they count as 500)"


def _check(path: Path, dsn: str) -> tuple[int, str]:
    console = Console(record=True, width=400)
    status = check_policy(str(path), dsn, console)
    return status, console.export_text()


def test_check_counts_the_rows_outside_the_declared_bounds(demo_dsn: str) -> None:
    status, out = _check(POLICY, demo_dsn)
    assert status == 0, out  # a warning, not an error
    assert WHALES in out, out
    assert "Widen bounds from what the column can hold" in out, out
    found = {(f.table, f.column) for f in range_findings(load_policy(POLICY), demo_dsn)}
    # quantity, purchased_at and age hold their bounds: no line for them
    assert ("public.purchases", "amount") in found and not found & {
        ("public.purchases", "quantity"),
        ("public.purchases", "purchased_at"),
        ("public.pums", "age"),
    }, found


def test_bounds_that_hold_the_data_draw_no_warning(demo_dsn: str, make_policy: PolicyMaker) -> None:
    amount = {"type": "numeric", "bounds": [0, 2000000]}
    income = {"type": "numeric", "bounds": [0, 100000000]}
    wide = {
        "public.purchases": demo_table("public.purchases", {"amount": amount}),
        "public.pums": demo_table("public.pums", {"income": income}),
    }
    path = make_policy("wide", tables=wide).path
    status, out = _check(path, demo_dsn)
    assert status == 0, out
    assert "rows above the declared" not in out, out
    assert "every bounded column's values lie in its declared bounds" in out, out


def test_a_below_range_value_is_counted(demo_dsn: str, make_policy: PolicyMaker) -> None:
    """The lower end too: quantity is 1 to 10 in the data; declared [2, 10], the rows with 1
    lie below (their exact number from PostgreSQL)."""
    import psycopg

    with psycopg.connect(demo_dsn) as conn:
        row = conn.execute("SELECT count(*) FROM purchases WHERE quantity < 2").fetchone()
    assert row is not None and row[0] > 0
    quantity = {"type": "integer", "bounds": [2, 10]}
    purchases = demo_table("public.purchases", {"quantity": quantity})
    path = make_policy("q", add_tables={"public.purchases": purchases}).path
    _, out = _check(path, demo_dsn)
    assert (
        f"public.purchases.quantity: {row[0]:,} rows below the declared 2 (they count as 2)" in out
    )


def test_no_analyst_path_runs_the_range_check() -> None:
    """Only the owner's CLI reads raw ranges: nothing under dpsql/ but the ``dpsql check``
    package (dpsql/check/: data.py defines range_findings, __init__.py's command calls it)
    names range_findings (the server's start-up checks import citus_findings only)."""
    root = Path(__file__).resolve().parents[3] / "dpsql"
    users = [
        p.relative_to(root).as_posix()
        for p in root.rglob("*.py")
        if "range_findings" in p.read_text() and root / "check" not in p.parents
    ]
    assert users == [], users
    assert (root / "check" / "data.py").is_file()  # where it is: a move would pass unseen


def test_check_says_which_columns_the_catalog_proves(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> None:
    """``amount`` has a validated CHECK within its declared bounds: proven (read unclamped);
    ``fee`` has a NOT VALID one and ``tip`` none: a note says what would make them cheaper."""
    import psycopg

    dsn = make_db("checkproof")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE pay (uid integer PRIMARY KEY, amount numeric "
            "CHECK (amount BETWEEN 0 AND 500), fee numeric, tip numeric)"
        )
        conn.execute("ALTER TABLE pay ADD CHECK (fee >= 0 AND fee <= 10) NOT VALID")
    pay = {
        "amount": {"type": "numeric", "bounds": [0, 500]},
        "fee": {"type": "numeric", "bounds": [0, 10]},
        "tip": {"type": "numeric", "bounds": [0, 100]},
    }
    path = make_policy(
        "pay",
        base={"version": 1, "dataset": "pay"},
        tables={"public.pay": private_table("uid", pay, rows=None, groups=None)},
    ).path
    found = {f.column: f for f in proof_findings(load_policy(path), dsn)}
    assert (
        not found["amount"].warning
        and "the catalog proves it in [0, 500]" in found["amount"].problem
    )
    assert found["fee"].warning and "CHECK (fee >= 0 AND fee <= 10)" in found["fee"].problem
    assert found["tip"].warning
    status, out = _check(path, dsn)
    assert status == 0 and "public.pay.amount: the catalog proves it in [0, 500]" in out, out


def test_check_reads_the_most_rows_one_unit_has(demo_dsn: str, make_policy: PolicyMaker) -> None:
    """The per-unit total (newcomer22 #8): without one, check says the most rows one unit has
    and what declaring max_rows_per_unit_total gives; one declared below it is a warning with
    how many units it cuts; one that holds, a plain line (exact counts from PostgreSQL)."""
    import psycopg

    with psycopg.connect(demo_dsn) as conn:
        row = conn.execute(
            "SELECT max(n), count(*) FILTER (WHERE n > 100) FROM "
            "(SELECT count(*) n FROM purchases GROUP BY user_id) s"
        ).fetchone()
    assert row is not None
    most, over = int(row[0]), int(row[1])
    assert over > 0  # the demo's whales
    _, out = _check(POLICY, demo_dsn)
    assert f"public.purchases: the most rows one user_id has: {most:,}" in out, out
    assert "max_rows_per_unit_total" in out, out
    total = demo_table("public.purchases", max_rows_per_unit_total=100)
    status, out = _check(
        make_policy("total", add_tables={"public.purchases": total}).path, demo_dsn
    )
    assert status == 0, out
    assert f"{over:,} user_id values have more rows than max_rows_per_unit_total (100" in out, out
    total = demo_table("public.purchases", max_rows_per_unit_total=most)
    _, out = _check(make_policy("total", add_tables={"public.purchases": total}).path, demo_dsn)
    assert f"public.purchases: every user_id has at most {most} rows in all" in out, out


def test_check_reads_the_most_key_values_one_unit_has(
    demo_dsn: str, make_policy: PolicyMaker
) -> None:
    """A keyed GROUP BY under auto G is sized for one unit in every key (newcomer23 #5: pums by
    educ, 16 keys, each pid in one): check reads the most values of each keyed column one unit
    has (exact, from PostgreSQL) and says what a declared max_groups_per_unit gives; nothing
    for a column whose people reach every key (purchases' categories) nor once G is declared."""
    import psycopg

    with psycopg.connect(demo_dsn) as conn:
        row = conn.execute(
            "SELECT max(e), max(c) FROM (SELECT count(DISTINCT educ) e, 0 c FROM pums GROUP BY pid"
            " UNION ALL SELECT 0, count(DISTINCT category) FROM purchases GROUP BY user_id) s"
        ).fetchone()
    assert row == (1, 5)  # the demo's facts the words below rest on
    _, out = _check(POLICY, demo_dsn)
    line = next(ln for ln in out.splitlines() if "values of a keyed column" in ln)
    assert line.startswith("public.pums: the most values of a keyed column one pid has:"), out
    assert "educ 1 of its 16 keys" in line and "GROUP BY educ: 16 groups, 16x the noise" in line
    assert "declaring max_groups_per_unit" in line.lower() and "category" not in line, out
    assert "public.purchases: the most values of a keyed column" not in out, out
    pums = demo_table("public.pums", max_groups_per_unit=1)
    path = make_policy("groups", add_tables={"public.pums": pums}).path
    status, out = _check(path, demo_dsn)
    assert status == 0 and "values of a keyed column" not in out, out


def test_no_check_is_suggested_that_the_data_breaks(demo_dsn: str) -> None:
    """The demo's amount has 2,000 rows above its declared 500: ``dpsql check`` said so, then
    suggested 'a validated CHECK (amount >= 0 AND amount <= 500) would make its queries
    cheaper', a constraint those rows make fail (newcomer30 W5, still there for newcomer31).
    The note now says why no such CHECK can be added yet; quantity, whose rows hold its bounds,
    keeps the suggestion."""
    status, out = _check(POLICY, demo_dsn)
    assert status == 0, out
    (amount,) = [x for x in out.splitlines() if x.startswith("public.purchases.amount: clamped")]
    assert "a validated CHECK" not in amount and "would not validate" in amount, amount
    assert "rows lie outside these bounds (above)" in amount, amount
    (quantity,) = [x for x in out.splitlines() if x.startswith("public.purchases.quantity: ")]
    assert "CHECK (quantity >= 1 AND quantity <= 10) would make its queries cheaper" in quantity
