"""The ledger against a plain Python model: random sequences of reserve / commit / refund / grant /
reset must leave the same totals and make the same decisions (refusals, "not open" errors)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from fractions import Fraction

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dpsql.budget import admin
from dpsql.budget.filter import DEFAULT_DELTA_SHARE, Filter, Spent, refund
from dpsql.budget.ledger import Ledger, Reservation
from dpsql.dp.accounting import Cost
from dpsql.errors import BudgetExhausted, InternalError
from tests.integration.budget.ledger_support import policy, totals

MICRO = Fraction(1, 10**6)
COSTS = (
    Cost(epsilon=Fraction(1, 3)),
    Cost(epsilon=Fraction(1, 10), delta=MICRO * 3),
    Cost(rho=Fraction(1, 100)),
    Cost(epsilon=Fraction(7, 10)),
)
LIMITS = {
    ("analyst", "a"): (Fraction(2), Fraction(1, 10**5)),
    ("analyst", "b"): (Fraction(2), Fraction(0)),
    ("dataset", "testdata"): (Fraction(3), Fraction(1, 10**5)),
}
_reserve = st.tuples(st.just("reserve"), st.sampled_from("ab"), st.integers(0, len(COSTS) - 1))
ops = st.lists(
    st.one_of(
        _reserve,
        _reserve,
        _reserve,
        st.tuples(st.just("commit"), st.integers(0, 8)),
        st.tuples(st.just("refund"), st.integers(0, 8)),
        st.tuples(st.just("grant"), st.sampled_from(["a", "b", None]), st.integers(1, 3)),
        st.tuples(st.just("reset"), st.sampled_from(["a", "b", None])),
    ),
    max_size=40,
)
_schemas = itertools.count()


class Model:
    """What the ledger should do, in memory: each budget's filter, its order fixed by the first
    release charged to it (grants included), kept across resets."""

    def __init__(self) -> None:
        self.spent = {k: Spent() for k in LIMITS}
        self.granted = {k: Fraction(0) for k in LIMITS}
        # the period's orders, fixed by its first release: (main, more), None before
        self.order: dict[tuple[str, str], tuple[Fraction, tuple[Fraction, ...]] | None] = (
            dict.fromkeys(LIMITS)
        )
        self.generation = dict.fromkeys(LIMITS, 0)
        self.open: dict[int, tuple[str, Cost, dict[tuple[str, str], int]]] = {}

    def keys(self, analyst: str) -> list[tuple[str, str]]:
        return [("analyst", analyst), ("dataset", "testdata")]

    def filter(self, k: tuple[str, str]) -> Filter:
        eps, delta = LIMITS[k]
        fixed = self.order[k]
        if fixed is None:
            return Filter.configure(eps + self.granted[k], delta)
        return Filter(eps + self.granted[k], delta, fixed[0], DEFAULT_DELTA_SHARE, fixed[1])

    def reserve(self, rid: int, analyst: str, cost: Cost) -> bool:
        filters = {k: self.filter(k) for k in self.keys(analyst)}
        if not all(f.admits(f.add(self.spent[k], cost)) for k, f in filters.items()):
            return False
        for k, f in filters.items():
            self.spent[k] = f.add(self.spent[k], cost)
            self.order[k] = None if f.order is None else (f.order, f.more)
        self.open[rid] = (analyst, cost, {k: self.generation[k] for k in self.keys(analyst)})
        return True

    def refund(self, rid: int) -> bool:
        if rid not in self.open:
            return False
        analyst, cost, gens = self.open.pop(rid)
        for k, g in gens.items():
            if self.generation[k] == g:
                fixed = self.order[k]
                self.spent[k] = refund(self.spent[k], cost, None if fixed is None else fixed[0])
        return True


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    return make_db("model")


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sequence=ops)
@example(  # a refund of a reservation made before a reset
    sequence=[("reserve", "a", 0), ("reset", "a"), ("reserve", "a", 0), ("refund", 0)]
)
def test_ledger_matches_model(dsn: str, sequence: list[tuple[object, ...]]) -> None:
    pol = policy(
        {"a": {"epsilon": 2.0, "delta": 1e-5, "max_epsilon": 5.0}, "b": {"epsilon": 2.0}},
        dataset_budget={"epsilon": 3.0, "delta": 1e-5},
    )
    schema = f"model{next(_schemas)}"
    model = Model()
    made: list[Reservation] = []
    with Ledger.open(dsn, pol, schema, pool_size=2) as ledger:
        for op in sequence:
            if op[0] == "reserve":
                _, analyst, i = op
                cost = COSTS[int(i)]  # type: ignore[call-overload]
                try:
                    res = ledger.reserve(str(analyst), cost, "m", delta_for_rho=MICRO)
                except BudgetExhausted:
                    assert not model.reserve(-1, str(analyst), cost), op
                    continue
                assert model.reserve(res.id, str(analyst), cost), op
                made.append(res)
            elif op[0] in ("commit", "refund") and made:
                res = made[int(op[1]) % len(made)]  # type: ignore[call-overload]
                expected_open = res.id in model.open
                try:
                    if op[0] == "commit":
                        ledger.commit(res)
                        model.open.pop(res.id)
                    else:
                        ledger.refund(res)
                        model.refund(res.id)
                    assert expected_open, op
                except InternalError:
                    assert not expected_open, op
            elif op[0] == "grant":
                admin.grant(ledger, "t", op[1], Fraction(int(op[2]), 10))  # type: ignore[arg-type, call-overload]
                key = ("analyst", str(op[1])) if op[1] else ("dataset", "testdata")
                model.granted[key] += Fraction(int(op[2]), 10)  # type: ignore[call-overload]
            elif op[0] == "reset":
                admin.reset(ledger, "t", op[1])  # type: ignore[arg-type]
                key = ("analyst", str(op[1])) if op[1] else ("dataset", "testdata")
                model.spent[key] = Spent()
                model.generation[key] += 1
    stored = totals(dsn, schema)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT kind, name, renyi_spent, renyi_order FROM {schema}.budget")
        renyi = {(k, n): (r, o) for k, n, r, o in rows}
    for k, spent in model.spent.items():
        assert stored.get(k, Cost()) == spent.cost, k
        r, o = renyi.get(k, ("0", None))
        orders = o and [Fraction(x) for x in o.split()]
        fixed = model.order[k]
        assert (r and Fraction(r), orders) == (
            spent.renyi,
            fixed and [fixed[0], *fixed[1]],
        ), k
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
