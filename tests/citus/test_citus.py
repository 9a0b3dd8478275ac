"""The rewrite on a Citus cluster: per-unit work runs on the workers, and the neighbouring-database
audits pass there too.

Tier of its own (marker ``citus``): runs when ``DPSQL_CITUS_DSN`` names a Citus coordinator whose
database may be overwritten with the demo tables (one process: no ``-n``), e.g.::

    tools/citus-local.sh start
    DPSQL_CITUS_DSN=$(tools/citus-local.sh dsn) python -m pytest -q -m citus tests/citus

``bash .ci/run`` builds Citus from the tarball beside the clone and runs the tier so (``.ci/citus``).

Every statement shape is run through the engine as an analyst runs it, under the demo policy as
shipped (``auto`` bounds: the bound choices' per-unit histograms, then the L1-capped or ranked
SQL) and with fixed bounds (the row- and group-ranking shapes); every SQL text the engine sends
to read private rows is EXPLAINed on the cluster, and :func:`tests.citus.plans.problems` must
find no per-unit work on the coordinator and no per-unit rows leaving the workers. Deterministic
(plans, not timings). The broken twins: a private table distributed by another column than its
unit, and a per-unit CTE Citus must plan as a subplan, are caught by the same check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import psycopg
import pytest
import sqlglot
from sqlglot import exp

from dpsql.check import catalog_findings
from dpsql.demo import POLICY, load_demo
from dpsql.engine import Engine
from dpsql.errors import UpstreamError
from dpsql.execute.backend import Backend, Rows
from dpsql.execute.private_sql import salt_of, salted
from dpsql.policy import load_policy
from dpsql.session import SessionContext
from dpsql.sql.auto_bounds import auto_items
from dpsql.sql.rewrite.measure_bounds import measure_bounds
from tests.citus.conftest import Demo
from tests.citus.plans import problems
from tests.dp_audit.test_audit_neighbours import (
    CAPPED,
    HEAVY,
    QUERIES,
    SHAPES,
    TWIN,
    UNITS_TWIN,
    audit_units,
    changed_units,
    count_every_row,
    l1_ratio,
    worst_ratio,
)
from tests.helpers import ledgered_engine
from tests.policies import build_policy, private_table

pytestmark = pytest.mark.citus

# Every shape of the rewrite (issue 19): decomposable measures (partials per unit and group),
# declared keys, partition selection, joins with a reference table and of co-located private
# tables, bucketed measures (quantiles, MIN/MAX, mode), COUNT(DISTINCT x) (rows ranked), grouping
# sets, a unit declared unique (no bounding), per-unit derived tables, several DP leaves.
STATEMENTS = [
    "SELECT COUNT(*) FROM purchases",
    "SELECT COUNT(*), SUM(amount) FROM purchases",
    "SELECT AVG(amount), VAR_POP(quantity) FROM purchases",
    "SELECT COUNT(DISTINCT user_id) FROM purchases",
    "SELECT category, COUNT(*), SUM(amount) FROM purchases GROUP BY category",
    "SELECT category, AVG(amount) FROM purchases GROUP BY category",
    "SELECT region, COUNT(DISTINCT user_id) FROM purchases GROUP BY region",
    "SELECT purchased_at, COUNT(*) FROM purchases GROUP BY purchased_at",
    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) FROM purchases",
    "SELECT category, percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) FROM purchases "
    "GROUP BY category",
    "SELECT MIN(amount), MAX(amount), mode() WITHIN GROUP (ORDER BY category) FROM purchases",
    "SELECT COUNT(DISTINCT region) FROM purchases",
    "SELECT category, COUNT(DISTINCT region) FROM purchases GROUP BY category",
    "SELECT r.name, COUNT(*), SUM(p.amount) FROM purchases p JOIN regions r ON r.code = p.region "
    "GROUP BY r.name",
    "SELECT u.sex, SUM(p.quantity) FROM purchases p JOIN pums u ON p.user_id = u.pid "
    "GROUP BY u.sex",
    "SELECT a.category, COUNT(DISTINCT b.amount) FROM purchases a "
    "JOIN purchases b ON a.user_id = b.user_id GROUP BY a.category",
    "SELECT sex, AVG(income), STDDEV(age) FROM pums GROUP BY sex",
    "SELECT category, COUNT(*), SUM(amount) FROM purchases GROUP BY ROLLUP(category)",
    "SELECT sex, COUNT(*), AVG(age) FROM members GROUP BY sex",
    # a per-unit derived table, a statement of several DP leaves, CUBE, a LEFT JOIN of private
    # tables
    "SELECT AVG(t) FROM (SELECT user_id, SUM(amount) AS t FROM purchases GROUP BY user_id) s",
    "SELECT (SELECT COUNT(*) FROM purchases) AS a, (SELECT AVG(income) FROM pums) AS b",
    "SELECT category, region, COUNT(*) FROM purchases GROUP BY CUBE(category, region)",
    "SELECT p.category, COUNT(DISTINCT p.user_id) FROM purchases p "
    "LEFT JOIN pums u ON u.pid = p.user_id GROUP BY p.category",
    # date_trunc keys from the column's bounds, a row-level CTE, a correlated EXISTS over a
    # public table, a window over released values, post-processing over a DP leaf, a UNION of
    # private parts, a join with a public table local to the coordinator, bounds a CHECK proves
    "SELECT date_trunc('month', purchased_at) AS m, COUNT(*), SUM(amount) FROM purchases "
    "GROUP BY 1",
    "WITH big AS (SELECT user_id, category, amount FROM purchases WHERE amount > 100) "
    "SELECT category, COUNT(*), AVG(amount) FROM big GROUP BY category",
    "SELECT category, COUNT(*) FROM purchases p WHERE EXISTS "
    "(SELECT 1 FROM regions r WHERE r.code = p.region AND r.name <> 'x') GROUP BY category",
    "SELECT category, COUNT(*), RANK() OVER (ORDER BY COUNT(*) DESC) FROM purchases "
    "GROUP BY category",
    "SELECT category, c / SUM(c) OVER () FROM "
    "(SELECT category, COUNT(*) AS c FROM purchases GROUP BY category) t",
    "SELECT 'p' AS t, COUNT(*) FROM purchases UNION ALL SELECT 'u', COUNT(*) FROM pums",
    "SELECT l.name, MAX(p.amount) FROM purchases p JOIN regions_local l ON l.code = p.region "
    "GROUP BY l.name",
    "SELECT sex, SUM(score), AVG(score) FROM members GROUP BY sex",
    # bucketed measures beside a unit count (partition selection's, or asked for) and beside a
    # COUNT(DISTINCT x) of a column without keys: cells summed, not grouping sets over rows
    "SELECT purchased_at, MIN(quantity), percentile_disc(0.9) WITHIN GROUP (ORDER BY quantity) "
    "FROM purchases GROUP BY purchased_at",
    "SELECT COUNT(DISTINCT user_id), COUNT(DISTINCT category) FROM purchases "
    "WHERE amount BETWEEN 10 AND 200",
    "SELECT category, COUNT(DISTINCT quantity), percentile_cont(0.5) WITHIN GROUP "
    "(ORDER BY amount) FROM purchases GROUP BY category",
    # post-processing over values that may be withheld (dpsql/sql/withheld_post.py): held
    # constructs, frame and LAG conditions over the same window, a nested query's EXISTS test,
    # a RIGHT JOIN's presence column, built values
    "WITH s AS (SELECT category, AVG(amount) AS a, COUNT(*) AS n FROM purchases "
    "GROUP BY category) SELECT category, COALESCE(a, 0), SUM(a) OVER (ORDER BY category), "
    "LAG(a) OVER (ORDER BY category), COALESCE((SELECT MAX(a) FROM s s2 "
    "WHERE s2.category = s.category), 0), ARRAY[a, n] FROM s ORDER BY COALESCE(a, 0) DESC",
    "WITH s AS (SELECT region, AVG(amount) AS a FROM purchases WHERE amount > 100 "
    "GROUP BY region) SELECT k.region, COALESCE(s.a, 0), COUNT(s.a) OVER () FROM s "
    "RIGHT JOIN (SELECT region, COUNT(*) AS c FROM purchases GROUP BY region) k "
    "ON s.region = k.region",
]
MEMBERS = {
    "age": {"type": "integer", "bounds": [0, 100]},
    "sex": {"type": "integer", "keys": [0, 1]},
    "score": {"type": "integer", "bounds": [0, 10]},
}
"""``members``: one row per unit (``uid`` its PRIMARY KEY): the unit-unique path; ``score``'s
bounds proven by a CHECK (no clamp)."""
MEMBERS_TABLE = (
    "CREATE TABLE members (uid integer PRIMARY KEY, age integer, sex integer, "
    "score integer CHECK (score BETWEEN 0 AND 10))"
)
MEMBERS_ROWS = (
    "INSERT INTO members SELECT u, (u * 7) % 90, u % 2, u % 11 FROM generate_series(1, 5000) u"
)
LOCAL_PUBLIC = "DROP TABLE IF EXISTS regions_local; CREATE TABLE regions_local AS TABLE regions"
"""``regions_local``: a public table left local to the coordinator (not a reference table)."""


# the demo policy as shipped (``auto``) and with fixed bounds, both with ``members``
POLICIES = {
    "auto": build_policy(
        add_tables={"public.members": private_table("uid", MEMBERS, rows=None, groups=None)},
        add_public_tables=["public.regions_local"],
    ),
    "fixed": build_policy(
        fixed_bounds=True,
        add_tables={"public.members": private_table("uid", MEMBERS, rows=1, groups=1)},
        add_public_tables=["public.regions_local"],
    ),
}


def load_members(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS members; " + MEMBERS_TABLE)
        conn.execute(
            "SELECT create_distributed_table('members', 'uid', colocate_with => 'purchases')"
        )
        conn.execute(MEMBERS_ROWS)
        conn.execute(LOCAL_PUBLIC)


@pytest.fixture(scope="module")
def citus_dsn(citus_demo: Demo) -> str:
    """The coordinator with the demo tables (loaded once for the tier by `dpsql demo
    --upstream`: tests/citus/conftest.py) and ``members``."""
    cli = citus_demo.cli
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "Citus: distributed by their privacy units" in cli.stdout, "not a Citus coordinator"
    load_members(citus_demo.dsn)
    return citus_demo.dsn


@pytest.fixture(scope="module")
def coordinator(citus_dsn: str) -> str:
    """The coordinator as Citus names it in EXPLAIN's ``Node:`` lines (it may hold tasks too)."""
    with psycopg.connect(citus_dsn) as conn:
        row = conn.execute(
            "SELECT nodename, nodeport FROM pg_dist_node WHERE groupid = 0"
        ).fetchone()
    info = psycopg.conninfo.conninfo_to_dict(citus_dsn)
    port = row[1] if row else info.get("port", 5432)
    return f"port={port} "


@pytest.fixture(scope="module")
def engines(citus_dsn: str) -> Iterator[dict[str, Engine]]:
    es = {k: Engine(p, citus_dsn, pool_size=2) for k, p in POLICIES.items()}
    yield es
    for e in es.values():
        e.close()


@pytest.fixture(scope="module")
def cengine(engines: dict[str, Engine]) -> Engine:
    """Fixed bounds (the neighbour audits' sensitivities are the policy's numbers)."""
    return engines["fixed"]


@dataclass(frozen=True)
class Sent:
    """One SQL text the engine sent to read private rows, as it sent it, and what the cluster
    answered."""

    text: str
    params: Any
    binary: bool
    rows: Rows


def sent(engine: Engine, sql: str) -> list[Sent]:
    """Every SQL text the engine sends to read private rows while answering ``sql`` (without a
    ledger: ``auto`` bounds are chosen from the data each time), with the cluster's answer to
    it. Type probes (``LIMIT 0``) read no rows and are left out."""
    out: list[Sent] = []
    run = engine.backend.run

    def recording(query: str, params: Any = None, *, private: bool, **kw: Any) -> Any:
        got = run(query, params, private=private, **kw)
        if private and not query.rstrip().endswith("LIMIT 0"):
            rows = Rows(got.columns, list(got.rows), got.status)  # not ``then``'s catalog rows
            out.append(Sent(query, params, kw.get("binary", False), rows))
        return got

    engine.backend.run = recording  # type: ignore[method-assign]
    try:
        engine.execute(engine.prepare(sql), SessionContext())
    finally:
        del engine.backend.run
    return out


@pytest.fixture(scope="module")
def coordinator_conn(citus_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """One session on the coordinator for the EXPLAINs (Citus caches its connections to the
    workers per session)."""
    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        yield conn


def explain(conn: psycopg.Connection[Any], text: str) -> list[str]:
    return [str(r[0]) for r in conn.execute("EXPLAIN " + text).fetchall()]


SENT: dict[tuple[str, str], list[Sent]] = {}


def sent_once(engines: dict[str, Engine], bounds: str, sql: str) -> list[Sent]:
    """:func:`sent` of ``sql`` under ``bounds``, once per module (two tests read the texts)."""
    if (bounds, sql) not in SENT:
        SENT[bounds, sql] = sent(engines[bounds], sql)
    return SENT[bounds, sql]


@pytest.mark.parametrize("bounds", ["auto", "fixed"])
@pytest.mark.parametrize("sql", STATEMENTS)
def test_per_unit_work_runs_on_the_workers(
    engines: dict[str, Engine],
    coordinator_conn: psycopg.Connection[Any],
    coordinator: str,
    sql: str,
    bounds: str,
) -> None:
    texts = [s.text for s in sent_once(engines, bounds, sql)]
    assert texts, "nothing read private rows"
    for text in texts:
        plan = explain(coordinator_conn, text)
        assert any("Custom Scan (Citus" in line for line in plan), "\n".join(plan)
        assert problems(plan, coordinator) == [], text + "\n" + "\n".join(plan)


@pytest.fixture(scope="module")
def plain_dsn(make_db: Callable[[str], str]) -> str:
    """The same demo data (and ``members``) on plain PostgreSQL: the test cluster's."""
    dsn = make_db("citus_twin")
    assert not load_demo(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(MEMBERS_TABLE)
        conn.execute(MEMBERS_ROWS)
        conn.execute(LOCAL_PUBLIC)
    return dsn


@pytest.fixture(scope="module")
def plain(plain_dsn: str) -> Iterator[Backend]:
    """The plain PostgreSQL read as the engine reads the cluster (its session settings and type
    loaders), with no statement timeout."""
    backend = Backend(plain_dsn, statement_timeout_ms=0, max_size=1)
    yield backend
    backend.close()


def same_rows(cluster: Rows, plain: Rows) -> bool:
    return sorted(map(tuple, cluster.rows), key=repr) == sorted(map(tuple, plain.rows), key=repr)


@pytest.mark.parametrize("bounds", ["auto", "fixed"])
@pytest.mark.parametrize("sql", STATEMENTS)
def test_the_cluster_gives_plain_postgresqls_numbers(
    engines: dict[str, Engine], plain: Backend, sql: str, bounds: str
) -> None:
    """Every SQL text dpsql sends (salt included) gives exactly the same rows on the cluster as
    on one PostgreSQL holding the same data: bounded sums and counts, removed mass, bucket
    counts, histograms (the keyed-hash choices are a function of the rows and the salt only, and
    the sums are NUMERIC: no order of addition shows). The cluster's rows are those it gave the
    engine (:func:`sent`), not a second run."""
    for s in sent_once(engines, bounds, sql):
        assert same_rows(s.rows, plain.run(s.text, s.params, private=True, binary=s.binary)), s.text


def test_a_choice_that_is_not_a_function_of_the_rows_is_caught(
    cengine: Engine, plain: Backend
) -> None:
    """The comparison's twin: groups (and rows) chosen by ``random()`` instead of the keyed hash
    of the salt. Per date, COUNT(DISTINCT quantity) over the groups each unit keeps: a unit keeps
    G = 5 of its dates, most units have about 10, so two independent draws keep other dates for
    thousands of units and the per-date counts differ; they could agree only if the draws
    happened to keep, date by date, the same numbers of rows (far below 1e-6)."""
    sql = "SELECT purchased_at, COUNT(DISTINCT quantity) FROM purchases GROUP BY purchased_at"
    s = sent_once({"fixed": cengine}, "fixed", sql)[-1]
    salt = salt_of(s.text)
    broken = s.text.replace(f"'{salt}'", "CAST(random() AS TEXT)")
    assert broken != s.text
    # the keyed hash: the same rows
    assert same_rows(s.rows, plain.run(s.text, s.params, private=True, binary=s.binary))
    on_cluster = cengine.backend.run(broken, s.params, private=True, binary=s.binary)
    assert not same_rows(on_cluster, plain.run(broken, s.params, private=True, binary=s.binary))


def test_the_auto_bounds_histogram_is_checked(
    engines: dict[str, Engine], coordinator_conn: psycopg.Connection[Any], coordinator: str
) -> None:
    """The auto tier does send a bound choice's per-unit histogram (so the test above checks it),
    and its twin, a per-unit CTE that must be materialized (Citus plans it as a subplan: one
    row per unit pulled to the coordinator), is caught."""
    sql = "SELECT COUNT(*), SUM(amount) FROM purchases"
    texts = [s.text for s in sent(engines["auto"], sql)]
    assert any("WIDTH_BUCKET" in t for t in texts), texts
    a = engines["auto"].prepare(sql).analysis
    assert a is not None
    text = measure_bounds(a, auto_items(a)).sql("postgres")
    assert problems(explain(coordinator_conn, text), coordinator) == []
    assert problems(explain(coordinator_conn, materialized(text)), coordinator) != []


def materialized(text: str) -> str:
    """The histogram SQL with its per-unit derived table ``_dp_u`` as a MATERIALIZED CTE."""
    q = sqlglot.parse_one(text, read="postgres")
    assert isinstance(q, exp.Select)
    sub = q.args["from_"].this
    assert isinstance(sub, exp.Subquery) and sub.alias == "_dp_u", text
    q.set("from_", exp.From(this=exp.to_table("_dp_u")))
    return q.with_("_dp_u", as_=sub.this.copy(), materialized=True).sql("postgres")


def test_a_table_not_distributed_by_its_unit_is_caught(
    cengine: Engine, citus_dsn: str, coordinator: str
) -> None:
    """The twin: pums distributed by age. Its per-unit partials (GROUP BY pid) can't run on the
    workers; the EXPLAIN check sees them leave the workers and `dpsql check` warns."""
    sql = "SELECT sex, AVG(income) FROM pums GROUP BY sex"
    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        conn.execute("SELECT undistribute_table('pums')")
        conn.execute("SELECT create_distributed_table('pums', 'age')")
        try:
            assert any(problems(explain(conn, s.text), coordinator) for s in sent(cengine, sql))
            found = catalog_findings(load_policy(POLICY), citus_dsn)
            assert [f.table for f in found if f.warning] == ["public.pums"], found
        finally:
            conn.execute("SELECT undistribute_table('pums')")
            conn.execute(
                "SELECT create_distributed_table('pums', 'pid', colocate_with => 'purchases')"
            )
    assert [f for f in catalog_findings(load_policy(POLICY), citus_dsn) if f.warning] == []


@pytest.mark.parametrize("bounds", ["auto", "fixed"])
def test_a_correlated_subquery_over_a_local_table_is_refused_and_refunded(
    citus_dsn: str, bounds: str
) -> None:
    """What Citus can't run: a correlated EXISTS over a public table local to the coordinator
    (``dpsql check`` warns about such a table). The statement fails with SQLSTATE 0A000, whose
    hint says to make it a reference table, and nothing is charged (0A is refunded: the form
    of a statement, not its data)."""
    sql = (
        "SELECT COUNT(*) FROM purchases p "
        "WHERE EXISTS (SELECT 1 FROM regions_local l WHERE l.code = p.region)"
    )
    with ledgered_engine(POLICIES[bounds], citus_dsn, "dpsql_citus") as engine:
        with pytest.raises(UpstreamError) as err:
            engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
        assert err.value.sqlstate == "0A000" and "reference table" in (err.value.hint or "")
        assert engine.ledger is not None
        assert all(b.epsilon_spent == 0 for b in engine.ledger.remaining("analyst"))


# -- the neighbouring-database audits (tests/dp_audit/test_audit_neighbours.py) on the cluster ----


@pytest.fixture(scope="module")
def units(citus_dsn: str) -> tuple[int, ...]:
    """As the plain audit's: two heavy units, the ordinary unit with the most rows, one in pums."""
    return audit_units(citus_dsn)


@pytest.mark.parametrize("sql", QUERIES)
def test_one_unit_moves_each_measure_by_at_most_its_sensitivity_on_citus(
    cengine: Engine, citus_dsn: str, units: tuple[int, ...], sql: str
) -> None:
    """Removing one unit (distributed DELETEs, rolled back) moves each bounded measure by at
    most its sensitivity, per group and over groups: exact, no randomness."""
    assert worst_ratio(cengine, citus_dsn, sql, units) <= 1


def test_a_wrong_bound_is_caught_on_citus(cengine: Engine, citus_dsn: str) -> None:
    assert worst_ratio(cengine, citus_dsn, TWIN, HEAVY[:1], rows_bound=1) > 1


@pytest.mark.parametrize("sql", CAPPED)
def test_an_l1_cap_bounds_what_one_unit_moves_on_citus(
    cengine: Engine, citus_dsn: str, units: tuple[int, ...], sql: str
) -> None:
    assert l1_ratio(cengine, citus_dsn, sql, HEAVY[2:3] + units, capped=True) <= 1


def test_a_unit_count_of_rows_is_caught_on_citus(cengine: Engine, citus_dsn: str) -> None:
    assert worst_ratio(cengine, citus_dsn, UNITS_TWIN, HEAVY[:1], broken=count_every_row) > 1


def test_an_l1_cap_that_is_not_applied_is_caught_on_citus(cengine: Engine, citus_dsn: str) -> None:
    assert l1_ratio(cengine, citus_dsn, CAPPED[0], HEAVY[:1], capped=False) > 1


@pytest.mark.parametrize("sql", SHAPES)
def test_keyed_hash_selection_is_each_units_own_on_citus(
    cengine: Engine, citus_dsn: str, sql: str
) -> None:
    """Removing one unit leaves every other unit's kept rows exactly as they were, on the
    cluster."""
    p = cengine.prepare(sql)
    assert p.analysis is not None
    text = salted(cengine.private_sql(p, p.analysis))
    assert changed_units(citus_dsn, text, HEAVY[:3]) == set()


def test_a_data_dependent_salt_is_caught_on_citus(cengine: Engine, citus_dsn: str) -> None:
    sql = "SELECT category, COUNT(DISTINCT region) FROM purchases GROUP BY category"
    p = cengine.prepare(sql)
    assert p.analysis is not None
    text = salted(cengine.private_sql(p, p.analysis))
    salt = salt_of(text)
    broken = text.replace(f"'{salt}'", "CAST((SELECT COUNT(*) FROM purchases) AS TEXT)")
    assert len(changed_units(citus_dsn, broken, HEAVY[:1])) > 100
