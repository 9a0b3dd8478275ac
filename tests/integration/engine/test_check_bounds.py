"""A column whose values a validated CHECK constraint keeps inside its declared bounds is read
unclamped (dpsql.sql.check_bounds, dpsql.execute.checked_bounds), and only then.

Deterministic properties of the SQL the engine writes and of answers with the zero-noise source
(no noisy output is asserted on), on a real PostgreSQL:

* ``CHECK (amount >= 0 AND amount <= 500)`` (or BETWEEN, or two constraints) with ``amount``
  declared [0, 500]: the private SQL reads ``CAST(amount AS NUMERIC)`` with no clamp, on a table
  with one row per unit and on one without (the bounded path);
* the clamp stays for a NOT VALID constraint, a wider one, none, an OR, a constraint of another
  table's column, a lower bound alone on a float column (which admits NaN), an inheritance
  child the parent's NO INHERIT constraint does not cover, a NO INHERIT constraint of a table
  with children (another child could come and go unseen), and a ``clamp: auto`` range chosen
  narrower than the declared one (whose removed-mass column, clamped into the declared range,
  is then read unclamped);
* the proof is read again just before the query: a constraint dropped after planning (and a
  value outside loaded) clamps again and the answer is the clamped one; dropped after that
  check, before the query runs, the statement is refused (55000) before anything is released;
  so is one whose NO INHERIT proof got a child (with a value outside) after that check, dropped
  again before the check after the query;
* EXPLAIN says what the catalog proves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import ObjectNotInPrerequisiteState
from dpsql.execute.prepared import PrivateQuery
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis
from dpsql.sql.apply_bounds import apply_bounds
from dpsql.sql.auto_bound_types import AutoBounds, ChosenBound
from dpsql.sql.auto_bounds import auto_items
from dpsql.sql.plan import Plan
from tests.helpers import EXACT
from tests.policies import build_policy

BOTH = "CHECK (amount >= 0 AND amount <= 500)"
TABLES = {
    # name: (column definitions after uid and g, extra DDL), the unit unique unless said
    "proven": (f"amount numeric {BOTH}", []),
    "btw": ("amount integer CHECK (amount BETWEEN 0 AND 500)", []),
    "two": ("amount numeric(12,2) CHECK (amount >= 0) CHECK (amount <= 400)", []),
    "notvalid": ("amount numeric", [f"ALTER TABLE notvalid ADD CONSTRAINT nv {BOTH} NOT VALID"]),
    "wider": ("amount numeric CHECK (amount >= 0 AND amount <= 1000)", []),
    "missing": ("amount numeric", []),
    "ored": ("amount numeric CHECK (amount >= 0 OR amount <= 500)", []),
    "other": ("amount numeric", []),
    "floatlo": ("amount float8 CHECK (amount >= 0)", []),
    "floatboth": ("amount float8 CHECK (amount >= 0 AND amount <= 500)", []),
    "autoc": (f"amount numeric {BOTH}", []),
    "dropped": (f"amount numeric CONSTRAINT dropped_c {BOTH}", []),
}
# no key on the unit: dropping a CHECK constraint writes the table's pg_class row (relchecks),
# which the identity of a proof of one row per unit includes (dpsql.execute.unique_units), so
# with a key the statement would be refused for that proof before this one is looked at
NO_KEY = {"dropped"}
NOT_UNIQUE = {"events": f"amount numeric {BOTH}"}


def _columns(clamp: str = "bounds") -> dict[str, object]:
    return {
        "uid": {"type": "integer", "identifier": True},
        "g": {"type": "integer", "keys": [0, 1]},
        "amount": {"type": "numeric", "bounds": [0, 500], "clamp": clamp},
    }


def _table(name: str, rows: int = 1) -> dict[str, object]:
    return {
        "privacy_unit": "uid",
        "max_rows_per_unit": rows,
        "max_groups_per_unit": 1,
        "columns": _columns("auto" if name == "autoc" else "bounds"),
    }


NAMES = [*TABLES, *NOT_UNIQUE, "parent", "parent2", "parted", "noinh", "noinhp"]
POLICY = build_policy(
    base={},
    version=1,
    dataset="checks",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    tables={f"public.{t}": _table(t, 2 if t == "events" else 1) for t in NAMES},
    analysts={"a": {"budget": {"epsilon": 100000, "delta": 0.5}}},
)
SESSION = SessionContext(analyst="a", epsilon=Fraction(1))
UNITS = 200


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("checks")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, (cols, extra) in TABLES.items():
            key = "NOT NULL" if name in NO_KEY else "PRIMARY KEY"
            conn.execute(f"CREATE TABLE {name} (uid integer {key}, g integer, {cols})")
            conn.execute(
                f"INSERT INTO {name} SELECT u, u % 2, u % 400 FROM generate_series(1, {UNITS}) u"
            )
            for ddl in extra:
                conn.execute(ddl)
        # a constraint on another table's column of the same name proves nothing here
        conn.execute(f"CREATE TABLE other_src (uid integer, amount numeric {BOTH})")
        conn.execute(
            f"CREATE TABLE events (uid integer NOT NULL, g integer, amount numeric {BOTH})"
        )
        conn.execute(
            "INSERT INTO events SELECT u % 50, u % 2, u % 400 FROM generate_series(1, 300) u"
        )
        # NO INHERIT: the child's rows are not covered
        conn.execute("CREATE TABLE parent (uid integer, g integer, amount numeric)")
        conn.execute(f"ALTER TABLE parent ADD CONSTRAINT p_c {BOTH} NO INHERIT")
        conn.execute("CREATE TABLE child () INHERITS (parent)")
        conn.execute("INSERT INTO child VALUES (1, 0, 100000)")
        # an inherited constraint: every child has it
        conn.execute(f"CREATE TABLE parent2 (uid integer, g integer, amount numeric {BOTH})")
        conn.execute("CREATE TABLE child2 () INHERITS (parent2)")
        conn.execute("INSERT INTO child2 VALUES (1, 0, 10)")
        conn.execute(
            f"CREATE TABLE parted (uid integer, g integer, amount numeric {BOTH}) "
            "PARTITION BY RANGE (uid)"
        )
        # NO INHERIT on a table without children proves its rows (a child added flips
        # relhassubclass, which writes the table's pg_class row: the proof's identity changes);
        # on one with children, nothing: another child needs no copy of it
        conn.execute("CREATE TABLE noinh (uid integer NOT NULL, g integer, amount numeric)")
        conn.execute(f"ALTER TABLE noinh ADD CONSTRAINT noinh_c {BOTH} NO INHERIT")
        conn.execute("INSERT INTO noinh SELECT u, u % 2, u % 400 FROM generate_series(1, 200) u")
        conn.execute("CREATE TABLE noinhp (uid integer, g integer, amount numeric)")
        conn.execute(f"ALTER TABLE noinhp ADD CONSTRAINT noinhp_c {BOTH} NO INHERIT")
        conn.execute(f"CREATE TABLE noinhp_child (uid integer, g integer, amount numeric {BOTH})")
        conn.execute("ALTER TABLE noinhp_child INHERIT noinhp")
        conn.execute("INSERT INTO noinhp_child VALUES (1, 0, 10)")
        conn.execute("CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100)")
        conn.execute("CREATE TABLE parted_2 PARTITION OF parted FOR VALUES FROM (100) TO (1000)")
        conn.execute("INSERT INTO parted SELECT u, u % 2, u % 400 FROM generate_series(1, 200) u")
    return dsn


@pytest.fixture(scope="module")
def engine(dsn: str) -> Iterator[Engine]:
    e = Engine(POLICY, dsn, pool_size=2, noise=EXACT)
    yield e
    e.close()


def _planned(engine: Engine, sql: str) -> tuple[PrivateQuery, Plan]:
    prepared = engine.prepare(sql)
    assert isinstance(prepared, PrivateQuery)
    plan = engine.plan(prepared, SESSION)
    assert isinstance(plan, Plan)
    return prepared, plan


def _text(engine: Engine, table: str, query: str = "SELECT SUM(amount) FROM {t}") -> str:
    prepared, plan = _planned(engine, query.format(t=table))
    return engine.private_sql(prepared, plan.analysis)


def clamped(text: str, table: str, lo: int = 0, hi: int = 500) -> bool:
    return (
        f'NUMERIC_SMALLER(NUMERIC_LARGER(CAST("{table}"."amount" AS DECIMAL), '
        f"CAST({lo} AS DECIMAL)), CAST({hi} AS DECIMAL))"
    ) in text


def bare(text: str, table: str) -> bool:
    """The value read as ``CAST(amount AS NUMERIC)`` (or as the integer itself, for an integer
    quantile) and never clamped (``NUMERIC_LARGER``, or ``CASE WHEN amount < 0``)."""
    col = f'"{table}"."amount"'
    read = f"CAST({col} AS DECIMAL)" in text or f"{col} AS _dp_v0" in text
    return read and "NUMERIC_LARGER" not in text and f"CASE WHEN {col} <" not in text


@pytest.mark.parametrize("table", ["proven", "btw", "floatboth", "parent2", "parted", "noinh"])
@pytest.mark.parametrize(
    "query",
    [
        "SELECT SUM(amount) FROM {t}",
        "SELECT g, COUNT(*), AVG(amount) FROM {t} GROUP BY g",
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) FROM {t}",
    ],
)
def test_a_proven_column_is_not_clamped(engine: Engine, table: str, query: str) -> None:
    prepared, plan = _planned(engine, query.format(t=table))
    assert plan.analysis.proven_bounds == ("amount",)
    text = engine.private_sql(prepared, plan.analysis)
    assert bare(text, table), text


def test_two_constraints_prove_a_narrower_range(engine: Engine) -> None:
    assert bare(_text(engine, "two"), "two")


def test_the_bounded_path_too(engine: Engine) -> None:
    """A unit with several rows: the partials read the value unclamped (the bounding of rows
    and of each unit's sum stays)."""
    text = _text(engine, "events", "SELECT g, SUM(amount) FROM {t} GROUP BY g")
    assert "_dp_parts" in text and bare(text, "events"), text


@pytest.mark.parametrize(
    "table", ["notvalid", "wider", "missing", "ored", "other", "floatlo", "parent", "noinhp"]
)
def test_the_clamp_stays_without_a_proof(engine: Engine, table: str) -> None:
    prepared, plan = _planned(engine, f"SELECT SUM(amount) FROM {table}")
    assert plan.analysis.proven_bounds == ()
    assert clamped(engine.private_sql(prepared, plan.analysis), table)


def test_a_lower_bound_alone_admits_nan(dsn: str) -> None:
    """Why both bounds are needed: NaN is above every number in PostgreSQL, so ``amount >= 0``
    alone lets it in; ``amount <= 500`` keeps it out."""
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO floatlo VALUES (-1, 0, 'NaN')")
        conn.rollback()
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO floatboth VALUES (-1, 0, 'NaN')")


def test_a_narrower_auto_clamp_stays(engine: Engine) -> None:
    """``clamp: auto`` chose 100 < 500: the measure's clamp into [0, 100] stays; the column that
    measures what it cut off (clamped into the declared range) is read unclamped."""
    prepared, plan = _planned(engine, "SELECT SUM(amount) FROM autoc")
    a = plan.analysis
    assert a.proven_bounds == ("amount",)
    (item,) = [it for it in auto_items(a) if it.kind == "value_hi"]
    chosen = ChosenBound("value_hi", item.column, Fraction(100), Fraction(1, 5), 1, len(item.grid))
    narrowed = engine.plan(prepared, SESSION, analysis=apply_bounds(a, AutoBounds((chosen,))))
    text = engine.private_sql(prepared, narrowed.analysis)
    assert clamped(text, "autoc", 0, 100), text
    assert not clamped(text, "autoc", 0, 500), text
    assert 'CAST("autoc"."amount" AS DECIMAL) AS' in text, text


def _restore(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM dropped WHERE amount > 500")
        conn.execute("ALTER TABLE dropped DROP CONSTRAINT IF EXISTS dropped_c")
        conn.execute(f"ALTER TABLE dropped ADD CONSTRAINT dropped_c {BOTH}")


def _drop_and_load(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE dropped DROP CONSTRAINT dropped_c")
        conn.execute("INSERT INTO dropped VALUES (100000, 0, 100000)")


CLAMPED_SUM = sum(u % 400 for u in range(1, UNITS + 1)) + 500  # the new row clamped to 500


def test_dropped_between_prepare_and_execute(engine: Engine, dsn: str) -> None:
    prepared = engine.prepare("SELECT SUM(amount) FROM dropped")
    _drop_and_load(dsn)
    try:
        assert float(engine.execute(prepared, SESSION).rows[0][0]) == CLAMPED_SUM
        assert clamped(_text(engine, "dropped"), "dropped")
    finally:
        _restore(dsn)
    assert bare(_text(engine, "dropped"), "dropped")


def test_dropped_between_plan_and_run_clamps_again(
    engine: Engine, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan took the proof; the constraint is dropped (and a value of 100,000 loaded) after
    it, before the SQL is written: the SQL clamps, the answer is the clamped sum."""
    checked = engine.checked_sql
    texts: list[str] = []

    def drop_first(prepared: PrivateQuery, a: Analysis) -> tuple[str, Analysis]:
        assert a.proven_bounds == ("amount",)  # the plan's
        _drop_and_load(dsn)
        got = checked(prepared, a)
        texts.append(got[0])
        return got

    monkeypatch.setattr(engine, "checked_sql", drop_first)
    try:
        got = engine.execute(engine.prepare("SELECT SUM(amount) FROM dropped"), SESSION)
        assert float(got.rows[0][0]) == CLAMPED_SUM
        assert texts and clamped(texts[0], "dropped"), texts
    finally:
        monkeypatch.undo()
        _restore(dsn)


@pytest.mark.parametrize("undone", [False, True], ids=["dropped", "dropped and added again"])
def test_dropped_while_the_query_runs_refuses(
    engine: Engine, dsn: str, monkeypatch: pytest.MonkeyPatch, undone: bool
) -> None:
    """Dropped (and a value outside loaded) after the check before the query: the SQL read the
    value unclamped, so the check after the query refuses the statement (55000).

    ``undone``: the privacy review's sequence: the row is then deleted and the constraint added
    again (validly) before the check after the query. The constraint's text is the same, its
    identity (oid) is not: refused all the same, nothing released. (Before dcf6a41 that check
    read the same text and the answer went out with the row unclamped.)"""
    import dpsql.execute.unique_units as unique_units

    checked = engine.checked_sql
    after = unique_units.still_proven

    def drop_after(prepared: PrivateQuery, a: Analysis) -> tuple[str, Analysis]:
        got = checked(prepared, a)
        assert bare(got[0], "dropped")
        _drop_and_load(dsn)
        return got

    def undo_then_check(backend: Any, a: Analysis, token: str = "", rows: Any = None) -> None:
        # the product reads this check in the query's own round trip and transaction (no DDL
        # can come between the two); read again here, after the DDL: the wider window
        _restore(dsn)  # the row gone, the constraint back: the same text, a new oid
        after(backend, a, token)

    monkeypatch.setattr(engine, "checked_sql", drop_after)
    if undone:
        monkeypatch.setattr(unique_units, "still_proven", undo_then_check)
    try:
        with pytest.raises(ObjectNotInPrerequisiteState, match="while the statement ran"):
            engine.execute(engine.prepare("SELECT AVG(amount) FROM dropped"), SESSION)
    finally:
        monkeypatch.undo()
        _restore(dsn)
    assert bare(_text(engine, "dropped"), "dropped")  # proven again for the next statement


def test_a_child_added_and_dropped_while_the_query_runs_refuses(
    engine: Engine, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``noinh``'s NO INHERIT constraint proves its own rows. After the check before the query,
    a child (which needs no copy of it) is added with a value of 100,000, which the query reads
    unclamped; it is dropped before the check after the query, which then reads the same
    relations and constraints. The child flipped ``relhassubclass``: the table's ``pg_class``
    row has another ``xmin``, the proof another identity: refused (55000), nothing released.
    (Before, the identity was the oids alone and the answer was released.)"""
    import dpsql.execute.unique_units as unique_units

    checked = engine.checked_sql
    after = unique_units.still_proven

    def add_child(prepared: PrivateQuery, a: Analysis) -> tuple[str, Analysis]:
        got = checked(prepared, a)
        assert bare(got[0], "noinh")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE noinh_child () INHERITS (noinh)")
            conn.execute("INSERT INTO noinh_child VALUES (100000, 0, 100000)")
        return got

    def drop_then_check(backend: Any, a: Analysis, token: str = "", rows: Any = None) -> None:
        # the product reads this check in the query's own round trip and transaction (no DDL
        # can come between the two); read again here, after the DDL: the wider window
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE noinh_child")
        after(backend, a, token)

    monkeypatch.setattr(engine, "checked_sql", add_child)
    monkeypatch.setattr(unique_units, "still_proven", drop_then_check)
    try:
        with pytest.raises(ObjectNotInPrerequisiteState, match="while the statement ran"):
            engine.execute(engine.prepare("SELECT SUM(amount) FROM noinh"), SESSION)
    finally:
        monkeypatch.undo()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS noinh_child")
            conn.execute("ANALYZE noinh")  # no child left: relhassubclass cleared
    assert bare(_text(engine, "noinh"), "noinh")  # proven again for the next statement


def test_explain_says_what_the_catalog_proves(engine: Engine) -> None:
    def explain(table: str) -> str:
        r = engine.execute(engine.prepare(f"EXPLAIN SELECT SUM(amount) FROM {table}"), SESSION)
        return "\n".join(str(row[0]) for row in r.rows)

    proven, missing = explain("proven"), explain("missing")
    assert "the catalog proves amount in [0, 500]" in proven, proven
    assert "the catalog proves amount" not in missing, missing
