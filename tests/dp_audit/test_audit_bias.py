"""Privacy audit of the removed-mass releases (what contribution bounding left out, issue 16).

D has 60 units with 2 rows each; D' adds one unit with 40 rows (max_rows_per_unit 3: it loses 37
rows, beyond the cap C = 4·R = 12). So D''s removed mass is C higher and its over-cap count 1
higher: the largest change one unit can make, the likelihood-ratio extreme for Laplace. The
events are fixed from the data before any draw: the released removed mass reaching D''s exact
value; the released over-cap count reaching D''s. For each, the Clopper-Pearson lower bound on the
realized epsilon (level 1 - 1e-6 over both directions) must not exceed the epsilon the plan
charges for that release; a twin whose removed-mass sensitivity is a quarter of C (a quarter of
the noise: what forgetting the cap's size would do) must be flagged.

The bounded SQL runs once per database on PostgreSQL; its removed-mass columns are released
``draws`` times by the engine's own :func:`dpsql.execute.bias.release_removed`.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator
from fractions import Fraction

import numpy as np
import psycopg
import pytest
from sqlglot import exp

from dpsql.dp.noise_source import CSPRNG
from dpsql.engine import Engine
from dpsql.execute.bias import release_removed
from dpsql.execute.private_sql import bounded_sql
from dpsql.session import SessionContext
from dpsql.sql.plan import Plan
from tests.dp_audit.auditing import epsilon_lower_bound, neighbouring_engines
from tests.policies import build_policy, private_table

BASE = {
    "version": 1,
    "dataset": "audit_bias",
    "defaults": {"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
}
COLUMNS = {"g": {"type": "text", "keys": ["a", "b"]}}
POLICY = build_policy(base=BASE, tables={"public.t": private_table("uid", COLUMNS, rows=3)})
SQL = "SELECT COUNT(*) FROM t"
DRAWS = 30_000


def _load(dsn: str, with_extreme: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid integer NOT NULL, g text NOT NULL)")
        rows = [(u, "ab"[u % 2]) for u in range(60) for _ in range(2)]
        if with_extreme:
            rows += [(999, "a")] * 40
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s)", rows)


@pytest.fixture(scope="module")
def engines(make_db: Callable[[str], str]) -> Iterator[tuple[Engine, Engine]]:
    yield from neighbouring_engines(make_db, POLICY, _load, "audit_bias")


def _plan(engine: Engine) -> Plan:
    session = SessionContext(analyst="auditor", epsilon=Fraction(4), mechanism="laplace")
    plan = engine.plan(engine.prepare(SQL), session)
    assert isinstance(plan, Plan) and len(plan.bias) == 1
    return plan


def _columns(engine: Engine, plan: Plan) -> tuple[int, int]:
    """The bounded SQL's (removed steps, over-cap count) of the only row."""
    row = engine.backend.run(engine.private_sql(engine.prepare(SQL), plan.analysis), private=True)
    return int(row.rows[0][-2]), int(row.rows[0][-1])


def quarter_cap(plan: Plan) -> Plan:
    """The broken twin: the removed mass released with a quarter of its sensitivity."""
    b = plan.bias[0]
    weak = dataclasses.replace(b.dropped, sensitivity=b.dropped.sensitivity / 4)
    return dataclasses.replace(plan, bias=(dataclasses.replace(b, dropped=weak),))


def _audit(engines: tuple[Engine, Engine], which: int, broken: bool = False) -> tuple[float, float]:
    """(epsilon lower bound, epsilon charged) of release ``which`` (0: removed mass, 1: over-cap)."""
    plans = [_plan(e) for e in engines]
    cols = [_columns(e, p) for e, p in zip(engines, plans, strict=True)]
    assert cols[1][0] - cols[0][0] == plans[0].bias[0].target.cap_steps  # the extreme shift
    assert cols[1][1] - cols[0][1] == 1
    grid = float(plans[0].bias[0].target.grid)
    threshold = cols[1][which] * (grid if which == 0 else 1.0)
    hits = []
    for plan, (steps, over) in zip(plans, cols, strict=True):
        used = quarter_cap(plan) if broken else plan
        got = release_removed(used, [([steps] * DRAWS, [over] * DRAWS)], CSPRNG)
        r = next(iter(got.values()))
        values = r.dropped if which == 0 else r.over_cap
        hits.append(int((np.asarray(values) >= threshold).sum()))
    b = plans[0].bias[0]
    charged = float((b.dropped if which == 0 else b.over_cap).epsilon)
    bound = max(
        epsilon_lower_bound(hits[0], DRAWS, hits[1], DRAWS, alpha=5e-7),
        epsilon_lower_bound(hits[1], DRAWS, hits[0], DRAWS, alpha=5e-7),
    )
    return bound, charged


def test_bias_releases_are_charged(engines: tuple[Engine, Engine]) -> None:
    """Their epsilons are in the plan's cost: 1/10 of the statement's, 3/4 and 1/4 of it."""
    plan = _plan(engines[0])
    b = plan.bias[0]
    assert b.dropped.epsilon == Fraction(4) / 10 * Fraction(3, 4)
    assert b.over_cap.epsilon == Fraction(4) / 10 / 4
    assert plan.cost.epsilon == 4


@pytest.mark.parametrize("which", [0, 1])
def test_removed_mass_release_audit(engines: tuple[Engine, Engine], which: int) -> None:
    bound, charged = _audit(engines, which)
    assert bound <= charged


def test_removed_mass_audit_flags_a_quarter_of_the_noise(engines: tuple[Engine, Engine]) -> None:
    # realized 4 x 0.3 = 1.2 against a claim of 0.3: the bound reads about 1.1
    bound, charged = _audit(engines, 0, broken=True)
    assert bound > charged


# -- grouped over declared keys (K = 2 <= G = 2: the cap is split over the groups, no window) ----
SPLIT_POLICY = build_policy(
    base=BASE, tables={"public.t": private_table("uid", COLUMNS, rows=3, groups=2)}
)
GROUPED = "SELECT g, COUNT(*) FROM t GROUP BY g"


def _load_both_groups(dsn: str, with_extreme: bool) -> None:
    """As ``_load``, the extra unit with 40 rows in 'a' and 40 in 'b'."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid integer NOT NULL, g text NOT NULL)")
        rows = [(u, "ab"[u % 2]) for u in range(60) for _ in range(2)]
        if with_extreme:
            rows += [(999, "a")] * 40 + [(999, "b")] * 40
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s)", rows)


@pytest.fixture(scope="module")
def split_engines(make_db: Callable[[str], str]) -> Iterator[tuple[Engine, Engine]]:
    yield from neighbouring_engines(make_db, SPLIT_POLICY, _load_both_groups, "audit_split")


def test_split_cap_moves_the_removed_vector_by_at_most_its_sensitivity(
    split_engines: tuple[Engine, Engine],
) -> None:
    """The unit in both groups loses 37 rows in each, beyond the per-group cap C/2 = 6: the
    removed-mass vector moves by exactly C/2 per group, C in L1 (the plan's sensitivity, reached),
    and the over-cap vector by 2 = K (its sensitivity)."""
    cols = []
    for e in split_engines:
        plan = e.plan(e.prepare(GROUPED), SessionContext(analyst="auditor", epsilon=Fraction(1)))
        assert isinstance(plan, Plan) and plan.bias[0].target.split == 2
        rows = e.backend.run(e.private_sql(e.prepare(GROUPED), plan.analysis), private=True).rows
        cols.append({r[0]: (int(r[-2]), int(r[-1])) for r in rows})
    b = plan.bias[0]
    moved = sum(abs(cols[1][g][0] - cols[0].get(g, (0, 0))[0]) for g in cols[1])
    over = sum(abs(cols[1][g][1] - cols[0].get(g, (0, 0))[1]) for g in cols[1])
    assert moved == 2 * b.target.group_cap_steps <= b.target.cap_steps
    assert b.dropped.sensitivity == b.target.cap * 1  # L1 = C
    assert over == 2 == b.over_cap.sensitivity


# -- grouped with a group ranking (K = 2 > G = 1): removed steps per (unit, group), capped per
# unit over its groups in its group order (measure_dropped) ----------------------------------
@pytest.fixture(scope="module")
def ranked_engines(make_db: Callable[[str], str]) -> Iterator[tuple[Engine, Engine]]:
    yield from neighbouring_engines(make_db, POLICY, _load_both_groups, "audit_ranked")


def _ranked_moves(engines: tuple[Engine, Engine]) -> tuple[int, int, Plan]:
    """(L1 move of the removed-steps vector, of the over-cap vector, D's plan) between the two
    databases, from the bounded SQL (not memoized: :func:`bounded_sql`)."""
    cols = []
    for e in engines:
        prepared = e.prepare(GROUPED)
        plan = e.plan(prepared, SessionContext(analyst="auditor", epsilon=Fraction(1)))
        assert isinstance(plan, Plan) and plan.bias[0].target.split == 1  # ranked: no split
        rows = e.backend.run(bounded_sql(prepared, plan.analysis), private=True).rows
        cols.append({r[0]: (int(r[-2]), int(r[-1])) for r in rows})
    moved = sum(abs(cols[1][g][0] - cols[0].get(g, (0, 0))[0]) for g in cols[1])
    over = sum(abs(cols[1][g][1] - cols[0].get(g, (0, 0))[1]) for g in cols[1])
    return moved, over, plan


def test_ranked_groups_move_the_removed_vector_by_at_most_its_sensitivity(
    ranked_engines: tuple[Engine, Engine],
) -> None:
    """The extra unit keeps one of its two groups (37 rows removed there) and loses the other
    (40 rows): 77 steps removed, counted up to C = 12 over both groups; the removed-mass vector
    moves by exactly C in L1 (the plan's sensitivity, reached) and the over-cap vector by 1."""
    moved, over, plan = _ranked_moves(ranked_engines)
    b = plan.bias[0]
    assert moved == b.target.cap_steps == 12
    assert b.dropped.sensitivity == b.target.cap * 1  # L1 = C
    assert over == 1 == b.over_cap.sensitivity


def test_ranked_sensitivity_check_catches_a_cap_per_group(
    ranked_engines: tuple[Engine, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Broken twin: each group's removed steps capped on their own (no running sum over the
    unit's earlier groups): the unit counts C in each of its groups, 2C in all. (With G = 1,
    as here, the earlier groups' steps are the rank window's ``_dp_sc``: first_kept_window.)"""
    monkeypatch.setattr(
        importlib.import_module("dpsql.sql.rewrite.measure_dropped"),
        "_before",
        lambda col, order: exp.Literal.number(0),
    )
    monkeypatch.setattr(
        importlib.import_module("dpsql.sql.rewrite.bound_partials"),
        "first_kept_window",
        lambda steps, order, i: exp.alias_(exp.Literal.number(0), f"_dp_sc{i}"),
    )
    moved, _, plan = _ranked_moves(ranked_engines)
    assert moved == 2 * plan.bias[0].target.cap_steps
