"""Property-based fuzzing of the private-query path with SQL from a grammar (sqlgrammar.py).

Properties:

* offline (many examples): parse -> classify -> analyze -> rewrite never raises anything but a
  DpsqlError, every refusal carries a 5-character SQLSTATE and a message, and an accepted query's
  rewritten SQL outputs only group keys and aggregates of bounded rows;
* on the demo database (fewer examples): every statement that reaches PostgreSQL over private
  rows is exactly ``Engine.private_sql`` of the analysis (or the zero-row type probe), and
  every upstream error is data-independent: a plan-time class (42 syntax/type, 0A feature), or
  an error PostgreSQL raises identically on an empty copy of the tables (constants folded by the
  planner, e.g. ``abs(-2147483648)``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from sqlglot import exp

from dpsql.demo import POLICY
from dpsql.engine import Engine
from dpsql.errors import DpsqlError, UpstreamError
from dpsql.execute.classify import classify
from dpsql.execute.prepared import TreeQuery
from dpsql.execute.private_sql import unsalted
from dpsql.policy import load_policy
from dpsql.session import SessionContext
from dpsql.sql.analyze import analyze
from dpsql.sql.parse import parse_statement
from dpsql.sql.rewrite import private_query
from tests.redteam.sqlgrammar import query
from tests.redteam.test_redteam import Recorder, _is_type_probe, empty_engine, unit_allowed

__all__ = ["empty_engine"]  # fixture: the demo schema with no rows

policy = load_policy(POLICY)
SQLSTATE = re.compile(r"^[0-9A-Z]{5}$")


def _check_refusal(e: DpsqlError) -> None:
    assert SQLSTATE.match(e.sqlstate), e
    assert e.message


def _check_rewrite(sql: str) -> None:
    tree = sqlglot.parse_one(sql, read="postgres")
    assert isinstance(tree, exp.Select)
    for item in tree.expressions:
        body = item.this if isinstance(item, exp.Alias) else item
        # group keys, value buckets (quantiles/MIN/MAX) and the grouping-set id of bucket_values
        is_key = item.alias_or_name.startswith(("_dp_g", "_dp_b", "_dp_set"))
        assert is_key or body.find(exp.AggFunc) is not None, item.sql()
    src = tree.args["from_"].this
    assert isinstance(src, (exp.Table, exp.Subquery))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(query())
def test_analyzer_never_crashes(sql: str) -> None:
    try:
        st = parse_statement(sql)
        assert st.tree is not None
        if classify(st.tree, policy) != "private":
            return
        a = analyze(st.tree, policy)
        rewritten = private_query(a, "salt").sql("postgres")
    except DpsqlError as e:
        _check_refusal(e)
        return
    _check_rewrite(rewritten)
    for m in a.measures:
        assert m.per_row() >= 0


@pytest.fixture(scope="module")
def fuzz_engine(demo_dsn: str, demo_policy) -> Iterator[tuple[Engine, Recorder]]:  # type: ignore[no-untyped-def]
    e = Engine(demo_policy, demo_dsn, pool_size=2)
    yield e, Recorder(e)
    e.close()


@pytest.mark.parametrize("examples", [pytest.param(60), pytest.param(400, marks=pytest.mark.slow)])
def test_fuzz_against_the_database(
    examples: int, fuzz_engine: tuple[Engine, Recorder], empty_engine: Engine
) -> None:
    engine, rec = fuzz_engine

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(query())
    def run(sql: str) -> None:
        rec.calls.clear()
        prepared = None
        try:
            prepared = engine.prepare(sql)
            engine.execute(prepared, SessionContext(analyst="analyst"))
        except UpstreamError as e:
            assert prepared is not None
            if prepared.kind == "private" and e.sqlstate[:2] not in ("42", "0A"):
                # only a plan-time error (same on an empty copy of the tables) is acceptable
                with pytest.raises(UpstreamError) as again:
                    empty_engine.execute(
                        empty_engine.prepare(sql), SessionContext(analyst="analyst")
                    )
                assert again.value.sqlstate == e.sqlstate, f"{e.sqlstate} depends on data: {sql}"
        except DpsqlError as e:
            _check_refusal(e)
        private = [q for p, q in rec.calls if p]
        if private:
            assert prepared is not None and prepared.kind == "private"
            # a tree statement runs each DP leaf's SQL
            units = prepared.leaves if isinstance(prepared, TreeQuery) else (prepared,)
            allowed = [q for u in units for q in unit_allowed(engine, u, ())]
            for q in private:
                assert unsalted(q) in allowed or _is_type_probe(q, allowed), (
                    f"unvalidated SQL upstream: {q}"
                )

    run()
