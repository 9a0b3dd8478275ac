"""The red-team corpus (corpus.yaml) through Engine.prepare/execute on the demo data: zero leaks.

For every attempt, whatever the expected outcome:

* a refusal is a DpsqlError raised *before* any SQL touched a private table, with the expected
  SQLSTATE, a message and (for dpsql's own refusals) a hint;
* a DP answer ran on private rows only SQL produced by the rewrite (``Engine.private_sql``) or
  the zero-row type probe, spent epsilon, and returned no raw identifier;
* a public/catalog/session answer read no private table;
* an upstream error on a private query is "static": PostgreSQL raises the same SQLSTATE on an
  empty copy of the tables, so the error can't depend on the data. Data exceptions (class 22)
  from private SQL never happen.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlglot
import yaml

from dpsql.engine import Engine
from dpsql.errors import ConstantRejected, DpsqlError, UpstreamError
from dpsql.execute.classify import classify
from dpsql.execute.grouping_sets import private_sqls
from dpsql.execute.prepared import PrivateQuery, TreeQuery
from dpsql.execute.private_sql import unsalted
from dpsql.execute.tree_prepare import bound_split
from dpsql.session import SessionContext
from dpsql.sql.rewrite.make_total import make_total

SQLSTATES = re.compile(r"^[0-9A-Z]{5}(\|([0-9A-Z]{5}|dp))*$")
CORPUS = yaml.safe_load((Path(__file__).parent / "corpus.yaml").read_text())


class Recorder:
    """Wraps an engine's backend to record every statement sent upstream."""

    def __init__(self, engine: Engine) -> None:
        self.calls: list[tuple[bool, str]] = []
        self._run = engine.backend.run

        def run(query: str, params: Any = None, **kw: Any) -> Any:
            self.calls.append((bool(kw.get("private")), query))
            if kw.get("then") is not None:  # dpsql's own catalog read, in the same round trip
                self.calls.append((False, kw["then"]))
            return self._run(query, params, **kw)

        engine.backend.run = run  # type: ignore[method-assign]

    def private(self) -> list[str]:
        return [q for p, q in self.calls if p]


@pytest.fixture(scope="module")
def rt_engine(demo_dsn: str, demo_policy) -> Iterator[tuple[Engine, Recorder]]:  # type: ignore[no-untyped-def]
    e = Engine(demo_policy, demo_dsn, pool_size=2)
    yield e, Recorder(e)
    e.close()


@pytest.fixture(scope="module")
def empty_engine(make_db: Callable[[str], str], demo_policy) -> Iterator[Engine]:  # type: ignore[no-untyped-def]
    from dpsql.demo import SCHEMA

    dsn = make_db("rtempty")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    e = Engine(demo_policy, dsn, pool_size=1)
    yield e
    e.close()


def _number(text: str) -> Fraction | float:
    try:
        return Fraction(text)
    except ValueError:
        return float(text)


def session(item: dict[str, Any]) -> SessionContext:
    s = SessionContext(analyst="analyst")
    if "epsilon" in item:
        s.epsilon = _number(str(item["epsilon"]))  # type: ignore[assignment]
    if "delta" in item:
        s.delta = _number(str(item["delta"]))  # type: ignore[assignment]
    return s


def _is_type_probe(sql: str, allowed: Sequence[str] = ()) -> bool:
    """A zero-row probe (dpsql.execute.group_keys._probe): LIMIT 0, and either no WHERE or the
    statement's own WHERE, exactly as one of the ``allowed`` (validated, bounded) SQL texts
    carries it."""
    tree = sqlglot.parse_one(sql, read="postgres")
    limit = tree.args.get("limit")
    if limit is None or limit.expression.sql() != "0":
        return False
    where = tree.args.get("where")
    if where is None:
        return True
    text = where.this.sql("postgres")
    return any(text in unsalted(q) for q in allowed)


def _allowed(engine: Engine, prepared: Any, params: tuple[Any, ...]) -> list[str]:
    """The bounded SQL texts of a private statement (one per grouping set, per leaf of a tree)."""
    if isinstance(prepared, TreeQuery):
        _, leaves = bound_split(engine, prepared, params)
        return [q for lf in leaves for q in unit_allowed(engine, lf, ())]
    return unit_allowed(engine, prepared, params)


def unit_allowed(engine: Engine, unit: Any, params: tuple[Any, ...]) -> list[str]:
    """The bounded SQL texts of one flat private statement (or a tree's leaf). When PostgreSQL
    refused its zero-row probe at plan time, or its constants (dpsql.execute.constant_probe),
    that probe, carrying the statement's own WHERE made total, is the only private SQL sent."""
    a = engine.analysis(unit, params)
    try:
        return private_sqls(engine, unit, a)
    except (UpstreamError, ConstantRejected):
        return [make_total(a.where, a.column).sql("postgres")] if a.where is not None else []


@pytest.mark.parametrize("item", CORPUS, ids=[f"{i:03d}" for i in range(len(CORPUS))])
def test_attempt(
    item: dict[str, Any], rt_engine: tuple[Engine, Recorder], empty_engine: Engine
) -> None:
    engine, rec = rt_engine
    rec.calls.clear()
    expect = str(item["expect"])
    params = tuple(item.get("params", ()))
    err: DpsqlError | None = None
    prepared = None
    result = None
    try:
        prepared = engine.prepare(item["sql"])
        if expect in ("session", "empty"):
            assert prepared.kind == expect
            return  # answered by the wire session, never run by the engine
        result = engine.execute(prepared, session(item), params)
    except DpsqlError as e:
        err = e
    private_sql = rec.private()

    if expect == "static":
        assert isinstance(err, UpstreamError), (
            f"expected a static upstream error: {item}, got {err!r}"
        )
        with pytest.raises(UpstreamError) as again:
            empty_engine.execute(empty_engine.prepare(item["sql"]), session(item), params)
        assert again.value.sqlstate == err.sqlstate
        return
    if isinstance(err, UpstreamError) and prepared is not None and prepared.kind == "private":
        assert not err.sqlstate.startswith("22"), f"data exception from private SQL: {item}"
    if SQLSTATES.match(expect) and not (err is None and "dp" in expect.split("|")):
        assert err is not None, f"expected refusal {expect}: {item['sql']}"
        assert not isinstance(err, UpstreamError), f"refusal came from upstream: {err!r}"
        assert err.sqlstate in expect.split("|"), f"{item['sql']}: {err!r}"
        assert err.message
        assert err.hint or err.sqlstate in ("42601", "42703", "42P01", "25006", "22023"), err
        if private_sql:  # only zero-row probes ran: of the statement's own validated SQL
            known = _allowed(engine, prepared, params) if isinstance(prepared, PrivateQuery) else []
            assert all(_is_type_probe(q, known) for q in private_sql), private_sql
        return
    assert err is None, f"{item['sql']}: unexpected {err!r} ({err.hint if err else ''})"
    assert prepared is not None and result is not None
    if "dp" in expect.split("|"):
        assert prepared.kind == "private"
        # a tree of DP leaves (#15): each leaf's bounded SQL; one per grouping set with ROLLUP
        allowed = _allowed(engine, prepared, params)
        assert private_sql, "the private query did not run"
        for q in private_sql:
            assert unsalted(q) in allowed or _is_type_probe(q, allowed), (
                f"unvalidated SQL reached PostgreSQL: {q}"
            )
        assert result.epsilon_spent > 0
        for row in result.rows:
            for v in row:
                assert not (isinstance(v, str) and "@" in v), "raw identifier in the output"
                if isinstance(v, float):
                    assert not math.isnan(v)
        return
    if expect == "free":  # answered from the policy alone: validated SQL only, nothing spent
        assert prepared.kind == "private"
        allowed = private_sqls(engine, prepared, engine.analysis(prepared, params))
        for q in private_sql:
            assert q in allowed or _is_type_probe(q, allowed), (
                f"unvalidated SQL reached PostgreSQL: {q}"
            )
        assert result.epsilon_spent == 0 and result.delta_spent == 0
        keys = [set(k) for k in engine.declared_keys(engine.analysis(prepared, params)) or []]
        assert keys and all(str(v) in keys[i] for row in result.rows for i, v in enumerate(row))
        return
    assert prepared.kind == expect, f"{item['sql']}: kind {prepared.kind}"
    calls = list(rec.calls)  # (what the checks below run is not the statement's)
    if expect == "explain" and isinstance(getattr(prepared, "inner", None), PrivateQuery):
        # EXPLAIN VERBOSE shows the SQL the statement sends (dpsql.execute.statement_sql),
        # typed by the statement's own zero-row probes (LIMIT 0: no row read)
        known = _allowed(engine, prepared.inner, params)
        probes = {q for q in private_sql if _is_type_probe(q, known)}
        private_sql = [q for q in private_sql if q not in probes]
    else:
        probes = set()
    assert not private_sql
    for _, q in calls:
        if q in probes:
            continue
        assert classify(sqlglot.parse_one(q, read="postgres"), engine.policy) != "private"


def test_corpus_size() -> None:
    assert len(CORPUS) >= 80
    assert {str(i["expect"]) for i in CORPUS} >= {"dp", "42501", "0A000", "25006", "static"}
