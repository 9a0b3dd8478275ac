"""``auto`` bounds chosen for a join of two private tables are DP at the epsilon they are charged.

Property: for every bound a statement over ``a JOIN b ON a.u = b.u`` chooses (rows per unit, per
group or over all its joined rows, groups per unit, the clamp of a column), the chosen value's
distribution on neighbouring databases D and D' (D' has one more person, unit 999: rows in
*both* tables, 127 in ``a`` over 40 groups at the largest value and 3 in ``b``, so 381 joined
rows, 264 of them in one group: above every other unit in every number) satisfies P_D'(S) <= e^epsilon P_D(S) and the reverse for
every event S, epsilon being what the ledger charges for that bound.

Why it should hold (docs/mechanisms.md, "Contribution bounds chosen from the data"): private
tables are joined on their units only, so every joined row carries one unit's value and the
histogram of per-unit numbers counts that unit once, whatever the product of its rows in the
two tables: the neighbour adds exactly one unit to each histogram (checked exactly below, on
the engine's own SQL), and the selection's utility moves by at most 1.

Method as :mod:`tests.dp_audit.test_audit_auto_bounds`: the engine's own SQL computes each
histogram on a real PostgreSQL (deterministic, so drawing many selections from it is running the
statement many times), the mechanisms are the engine's own at the charged epsilons, events are
picked on a first batch of draws and bounded with Clopper-Pearson on a second (each check at
1e-6 / checks: false failure <= 1e-6 for the test). The broken twin (each selection at 4x its
charged epsilon) must be flagged on the per-group row and group bounds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import psycopg
import pytest

from dpsql.dp.bounds import COUNT_SHARE, TailRank, TopRank
from dpsql.engine import Engine
from dpsql.execute import auto_bounds
from dpsql.session import SessionContext
from tests.dp_audit.auditing import ALPHA, neighbouring_engines
from tests.dp_audit.test_audit_auto_bounds import (
    _audit,
    _audit_pair_and_output,
    _charged_as_audited,
)
from tests.policies import build_policy, private_table

EPSILON = Fraction(10)
POLICY = build_policy(
    base={},
    version=1,
    dataset="join_audit",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    tables={
        "public.a": private_table(
            "u",
            {
                "g": {"type": "integer", "keys": list(range(40))},
                "x": {"type": "numeric", "bounds": [0, 100]},
            },
            rows=None,
            groups=None,
        ),
        "public.b": private_table(
            "u", {"h": {"type": "integer", "keys": [0, 1, 2]}}, rows=None, groups=None
        ),
    },
    analysts={"analyst": {"budget": {"epsilon": 1000, "delta": 1e-3}}},
)
JOIN = "a JOIN b ON a.u = b.u"
STATEMENTS = (
    f"SELECT COUNT(*), SUM(a.x) FROM {JOIN}",  # R over all joined rows (TailRank), x's clamp
    f"SELECT a.g, COUNT(*), AVG(a.x) FROM {JOIN} GROUP BY a.g",  # R per group, G, x's clamp
    f"SELECT AVG(a.x) FROM {JOIN}",  # R at the median unit, x's clamp
    # G, and L1 caps over a unit's groups (its joined rows, its sum of x)
    f"SELECT a.g, COUNT(*), SUM(a.x) FROM {JOIN} GROUP BY a.g",
)


def _load(dsn: str, extra: bool) -> None:
    """200 units whose largest row count in a group (group 0), groups and largest values fall
    off geometrically from the top (a few units per bucket of each grid around the target
    ranks, as in the single-table audit), under the pre-join cap (at most 127 rows in ``a``),
    each with one row in ``b``; the neighbour above all (3 rows in ``b``: its joined rows are
    the product)."""
    rows_a, rows_b = [], []
    for u in range(200):
        n, groups, top = max(1, round(88 * 0.9**u)), max(1, round(40 * 0.93**u)), 100 * 0.93**u
        rows_a += [(u, 0, round(top * (1 - i / (2 * n)), 3)) for i in range(n)]
        rows_a += [(u, g, round(top / 2, 3)) for g in range(1, groups)]
        rows_b.append((u, 0))
    if extra:
        rows_a += [(999, 0, 100)] * 88 + [(999, g, 100) for g in range(1, 40)]
        rows_b += [(999, i) for i in range(3)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE a (u integer, g integer, x numeric)")
        conn.execute("CREATE TABLE b (u integer, h integer)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO a VALUES (%s, %s, %s)", rows_a)
            cur.executemany("INSERT INTO b VALUES (%s, %s)", rows_b)


@pytest.fixture(scope="module")
def engines(make_db: Callable[[str], str]) -> Iterator[tuple[Engine, Engine]]:
    yield from neighbouring_engines(make_db, POLICY, _load, "joinb")


def _items(engine: Engine, sql: str) -> tuple[Any, list[Any], list[np.ndarray]]:
    s = SessionContext(analyst="analyst", epsilon=EPSILON)
    prepared = engine.prepare(sql, "analyst")
    a = engine.analysis(prepared, [])
    assert a.pre_join_rows == 256  # two private tables, both auto, no public: P = 256
    pend = auto_bounds.pending(engine, prepared, s, a)
    mechs = auto_bounds.mechanisms(pend, EPSILON)
    return pend, mechs, auto_bounds.histograms(engine, a, pend.missing)


def _all_items(engines: tuple[Engine, Engine]) -> list[tuple[str, Any, np.ndarray, np.ndarray]]:
    d, d2 = engines
    out = []
    for sql in STATEMENTS:
        pend, mechs, hist_d = _items(d, sql)
        _, mechs2, hist_d2 = _items(d2, sql)
        assert mechs == mechs2
        for it, m, h1, h2 in zip(pend.missing, mechs, hist_d, hist_d2, strict=True):
            # the neighbour, with rows in both tables, is one more unit in every histogram
            assert int(h2.sum()) == int(h1.sum()) + 1 == 201, (sql, it.kind)
            assert int(np.abs(h2 - h1).sum()) in (1, 2), (sql, it.kind)
            out.append((f"{sql}: {it.kind}", m, h1, h2))
    kinds = sorted(k.split(": ")[1] for k, *_ in out)
    assert (
        kinds == ["groups", "groups", "rows", "rows", "rows", "total", "total"] + ["value_hi"] * 3
    ), kinds
    assert any(isinstance(m, TailRank) for _, m, _, _ in out)
    return out


def test_join_bound_choices_are_dp_at_their_charged_epsilon(
    engines: tuple[Engine, Engine],
) -> None:
    """Ten bounds over the join, each at level 1 - 1e-6/10 on its output (a TailRank's also on
    its pair of selections, sharing that bound's share): false failure <= 1e-6."""
    items = _all_items(engines)
    for name, mech, h_d, h_d2 in items:
        share = 3 if name.startswith("SELECT a.g") else 2  # bounds sharing the slice
        assert mech.epsilon == EPSILON / 5 / share, name
        alpha = ALPHA / len(items)
        if isinstance(mech, TailRank):  # the pair and the bound from the same draws
            pair, lb = _audit_pair_and_output(mech, h_d, h_d2, alpha / 2, alpha / 2)
            assert pair <= float(mech.epsilon), (name, pair)
        else:
            lb = _audit(mech, h_d, h_d2, alpha=alpha)
        assert lb <= float(mech.epsilon), (name, lb, float(mech.epsilon))


def test_join_broken_twin_is_caught(engines: tuple[Engine, Engine]) -> None:
    """The per-group row bound and the group bounds run at 4x their charge (a quarter of the
    noise): the audit flags them on these neighbours."""
    caught = []
    for name, mech, h_d, h_d2 in _all_items(engines):
        if not name.startswith("SELECT a.g") or not name.endswith(("rows", "groups")):
            continue
        assert isinstance(mech, TopRank)
        broken = TopRank(mech.epsilon * 4 / (1 - COUNT_SHARE), mech.rank)
        caught.append((name, _audit(broken, h_d, h_d2) > float(mech.epsilon)))
    assert len(caught) == 3 and all(c for _, c in caught), caught


def test_join_ledger_charges_the_audited_epsilons(
    engines: tuple[Engine, Engine], make_db: Callable[[str], str]
) -> None:
    """Running each statement records one ``auto_bound`` release per bound at exactly the
    audited mechanism's epsilon; the statement's total is the epsilon it asked for."""
    d, _ = engines
    _charged_as_audited(d.backend.dsn, POLICY, STATEMENTS, _items, EPSILON)
