"""The budget's privacy filter (dpsql.budget.filter) against hand-computed values and independent
60-digit arithmetic: admitted sequences always satisfy the Renyi (or pure) bound fixed in advance,
the old realized-total check's adaptive counter-example is refused where the filter says, and a
deliberately broken filter (that old check) fails the same property."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction as F

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.budget.filter import Filter, Spent, charge, refund
from dpsql.budget.records import BudgetRow, Limit
from dpsql.dp.accounting import (
    Cost,
    epsilon_to_rho,
    renyi_conversion,
    renyi_divergence,
    rho_to_epsilon,
)

mpmath.mp.dps = 60
MICRO = F(1, 10**6)


def _m(x: F) -> mpmath.mpf:
    return mpmath.mpf(x.numerator) / x.denominator


def _conversion(order: F, delta: F) -> mpmath.mpf:
    """CKS20 Proposition 12, computed independently: (ln 1/d + (a-1) ln(1-1/a) - ln a) / (a-1)."""
    a, d = _m(order), _m(delta)
    return (mpmath.log(1 / d) + (a - 1) * mpmath.log(1 - 1 / a) - mpmath.log(a)) / (a - 1)


def _rdp(costs: list[Cost], order: F) -> mpmath.mpf:
    """sum_i min(eps_i, a eps_i^2 / 2) + a rho_i, at 60 digits."""
    a = _m(order)
    return mpmath.fsum(
        min(_m(c.epsilon), a * _m(c.epsilon) ** 2 / 2) + a * _m(c.rho) for c in costs
    )


def _deltas(f: Filter) -> list[tuple[F, F]]:
    """(order, the delta it converts with), computed here: all of delta_conversion for a lone
    order; else 3/4 for the main one and the rest split evenly over the others."""
    if f.order is None:
        return []
    if not f.more:
        return [(f.order, f.delta_conversion)]
    rest = f.delta_conversion / 4 / len(f.more)
    return [(f.order, f.delta_conversion * 3 / 4), *((o, rest) for o in f.more)]


def _within_bound(costs: list[Cost], f: Filter) -> bool:
    """The guarantee the filter promises, checked from scratch: explicit deltas within their share,
    and the Renyi bound at one of the budget's orders (or, all pure, the epsilon sum) within
    epsilon_B, each order converting with its own share of the conversion delta (they add up to
    delta_conversion: the union bound)."""
    if sum((c.delta for c in costs), F(0)) > f.delta_explicit:
        return False
    if all(c.rho == 0 for c in costs) and sum((c.epsilon for c in costs), F(0)) <= f.epsilon:
        return True
    if f.order is None or f.delta_conversion == 0:
        return False
    assert sum((d for _, d in _deltas(f)), F(0)) == f.delta_conversion
    return any(_rdp(costs, a) + _conversion(a, d) <= _m(f.epsilon) for a, d in _deltas(f))


def _run(f: Filter, costs: list[Cost]) -> tuple[list[Cost], Spent]:
    """Offer each cost in turn; returns the admitted ones and the final totals."""
    spent, admitted = Spent(), []
    for c in costs:
        after = f.add(spent, c)
        if f.admits(after):
            spent = after
            admitted.append(c)
    return admitted, spent


def test_hand_computed_budget() -> None:
    """(1, 1e-6): half of delta for explicit deltas; order 23.3 (the best for 5e-7);
    c(23.3, 5e-7) = (ln 2e6 + 22.3 ln(22.3/23.3) - ln 23.3) / 22.3 = 0.4655595231837... (the
    order alone, as a policy's renyi_order: no more orders)"""
    f = Filter.configure(F(1), MICRO, F(233, 10))
    assert (f.order, f.delta_explicit, f.delta_conversion) == (F(233, 10), MICRO / 2, MICRO / 2)
    assert f.overhead is not None
    assert float(f.overhead) == pytest.approx(0.4655595231837, abs=1e-12)
    assert _m(f.overhead) >= _conversion(F(233, 10), MICRO / 2)  # rounded up
    pure = f.add(Spent(), Cost(epsilon=F(1, 10)))
    assert pure.renyi == F(1, 10)  # min(0.1, 23.3 * 0.01 / 2 = 0.1165)
    assert f.epsilon_spent(pure) == F(1, 10)  # pure: plain sum, no conversion cost
    small = f.add(Spent(), Cost(epsilon=F(1, 100)))
    assert small.renyi == F(233, 10) * F(1, 100) ** 2 / 2  # 0.001165 < 0.01
    gauss = f.add(pure, Cost(rho=F(1, 1000)))
    assert gauss.renyi == F(1, 10) + F(233, 10000)
    assert f.epsilon_spent(gauss) == F(1, 10) + F(233, 10000) + f.overhead
    assert f.need(pure, Cost(rho=F(1, 1000))) == F(233, 10000) + f.overhead  # one-time cost
    assert f.need(gauss, Cost(rho=F(1, 1000))) == F(233, 10000)
    # explicit deltas: 5e-7 in all
    d = f.add(Spent(), Cost(epsilon=F(1, 10), delta=MICRO / 2))
    assert f.admits(d) and not f.admits(f.add(d, Cost(epsilon=F(1, 10), delta=F(1, 10**12))))
    assert f.epsilon_remaining(d) == F(9, 10)


def test_delta_zero_budget_is_plain_summation() -> None:
    f = Filter.configure(F(1), F(0))
    assert f.order is None and f.overhead is None
    s = Spent()
    for _ in range(10):
        s = f.add(s, Cost(epsilon=F(1, 10)))
        assert f.admits(s)
    assert not f.admits(f.add(s, Cost(epsilon=F(1, 10**12))))
    assert not f.admits(f.add(Spent(), Cost(rho=F(1, 10**6))))  # no Gaussian without delta
    assert f.need(Spent(), Cost(rho=F(1, 10**6))) is None
    assert not f.admits(f.add(Spent(), Cost(epsilon=F(1, 10), delta=F(1, 10**12))))


def test_pure_then_gaussian_counter_example_refused_at_the_right_point() -> None:
    """The old check (pure sum + rho converted at the delta left, re-chosen after the fact) let an
    analyst spend pure epsilon 0.7 and still add Gaussian rho 0.0015 on (1, 1e-6). The filter admits
    the Gaussian after k pure releases of 0.1 iff 0.1 k + 23.3 * 0.0015 + c <= 1, c = 0.46556:
    k <= 4.9949, so k = 4 passes and k = 5 is refused; pure releases go on up to 1 in all (order
    23.3 alone)."""
    f = Filter.configure(F(1), MICRO, F(233, 10))
    gauss = Cost(rho=F(15, 10**4))
    threshold = (1 - _m(F(233, 10) * F(15, 10**4)) - _conversion(F(233, 10), MICRO / 2)) / _m(
        F(1, 10)
    )
    assert 4 < threshold < 5
    s = Spent()
    for k in range(1, 11):
        s = f.add(s, Cost(epsilon=F(1, 10)))
        assert f.admits(s)  # pure: the plain sum up to 1
        assert f.admits(f.add(s, gauss)) == (k <= 4), k
        old = k * F(1, 10) + rho_to_epsilon(gauss.rho, MICRO) <= 1
        assert old == (k <= 7), k  # what the realized-total check allowed


def _old_rule(costs: list[Cost], epsilon: F, delta: F) -> bool:
    """The previous, unsound check: pure sum + rho converted at the delta left over."""
    eps = sum((c.epsilon for c in costs), F(0))
    d = sum((c.delta for c in costs), F(0))
    rho = sum((c.rho for c in costs), F(0))
    if d > delta:
        return False
    if rho == 0:
        return eps <= epsilon
    return delta - d > 0 and eps + rho_to_epsilon(rho, delta - d) <= epsilon


def test_broken_filter_fails_the_property() -> None:
    """The old rule admits both a pure-heavy path A and a Gaussian-only path B (an analyst picks
    between them after the first answers), and no single Renyi order, fixed in advance, covers
    both (A needs alpha >= 101.5, B alpha <= 45.5) with the whole conversion delta: the bound
    checked by the property test rejects it, as it must."""
    a_path = [Cost(epsilon=F(9, 10)), Cost(rho=epsilon_to_rho(F(1, 10), MICRO))]
    b_path = [Cost(rho=epsilon_to_rho(F(1), MICRO))]
    assert _old_rule(a_path, F(1), MICRO) and _old_rule(b_path, F(1), MICRO)
    orders = [1 + F(k, 4) for k in range(1, 800)]  # 1.25 .. 200.75, even with all of delta
    assert not any(
        _within_bound(a_path, Filter(F(1), MICRO, a, F(0)))
        and _within_bound(b_path, Filter(F(1), MICRO, a, F(0)))
        for a in orders
    )
    f = Filter.configure(F(1), MICRO, F(233, 10))  # one order, all of the conversion delta
    assert _run(f, a_path)[0] != a_path or _run(f, b_path)[0] != b_path  # the filter refuses one
    # with more orders each path may be covered by its own order, at its own share of the
    # conversion delta (the union bound: what the property test checks); the old rule spent the
    # whole delta on each
    g = Filter.configure(F(1), MICRO)
    for path in (a_path, b_path):
        admitted, _ = _run(g, path)
        assert _within_bound(admitted, g)


costs = st.one_of(
    st.builds(lambda e: Cost(epsilon=e), st.fractions(F(1, 1000), F(2), max_denominator=1000)),
    st.builds(lambda r: Cost(rho=r), st.fractions(F(1, 10**5), F(1, 2), max_denominator=10**5)),
    st.builds(
        lambda e, r: Cost(epsilon=e, rho=r),
        st.fractions(F(1, 1000), F(1), max_denominator=1000),
        st.fractions(F(1, 10**5), F(1, 10), max_denominator=10**5),
    ),
    st.builds(
        lambda e, d: Cost(epsilon=e, delta=d),
        st.fractions(F(1, 1000), F(1), max_denominator=1000),
        st.sampled_from([F(1, 10**9), F(1, 10**7), MICRO / 4, MICRO]),
    ),
)
gaussians = st.builds(
    lambda r: Cost(rho=r), st.fractions(F(1, 10**5), F(1, 2), max_denominator=10**5)
)
budgets = st.builds(
    Filter.configure,
    st.fractions(F(1, 10), F(10), max_denominator=100),
    st.sampled_from([F(0), F(1, 10**9), MICRO, F(1, 10**5), F(1, 1000)]),
    st.one_of(st.none(), st.sampled_from([F(3, 2), F(4), F(16), F(64)])),
    st.sampled_from([F(0), F(1, 4), F(1, 2), F(1)]),
)


@settings(max_examples=200, deadline=None)
@given(f=budgets, offered=st.lists(costs, max_size=30))
def test_admitted_sequences_satisfy_the_bound(f: Filter, offered: list[Cost]) -> None:
    """Property: whatever is offered, the admitted sequence satisfies the bound fixed in advance
    (recomputed at 60 digits), every prefix too, and the totals are the exact sums."""
    admitted, spent = _run(f, offered)
    for n in range(len(admitted) + 1):
        assert _within_bound(admitted[:n], f), n
    # the running totals are the exact sums, or (denominators past 1e30) just above them
    slack = len(admitted) * F(1, 10**30)
    exact = sum(admitted, Cost())
    for name in ("epsilon", "delta", "rho"):
        assert 0 <= getattr(spent.cost, name) - getattr(exact, name) <= slack, name
    if f.order is not None:
        assert spent.renyi is not None
        exact_r = sum((renyi_divergence(c, f.order) for c in admitted), F(0))
        assert 0 <= spent.renyi - exact_r <= slack
    # a refused cost stays refused (the filter is monotone: nothing is admitted by spending more)
    for c in offered:
        if c not in admitted:
            assert not f.admits(f.add(spent, c))


@settings(max_examples=100, deadline=None)
@given(f=budgets, offered=st.lists(gaussians, max_size=30))
def test_admitted_gaussians_meet_the_exact_gaussian_profile(f: Filter, offered: list[Cost]) -> None:
    """All-Gaussian sequences: the composition is one Gaussian with mu = sqrt(2 sum rho), whose
    exact hockey-stick divergence at epsilon_B (Balle & Wang 2018) stays within delta_conversion."""
    admitted, spent = _run(f, offered)
    if not admitted:
        return
    mu = mpmath.sqrt(2 * _m(spent.cost.rho))
    eps = _m(f.epsilon)
    exact_delta = mpmath.ncdf(-eps / mu + mu / 2) - mpmath.exp(eps) * mpmath.ncdf(
        -eps / mu - mu / 2
    )
    assert exact_delta <= _m(f.delta_conversion)


def test_refund_undoes_a_charge_exactly() -> None:
    order = F(233, 10)
    s = charge(Spent(), Cost(epsilon=F(1, 3)), order)
    s2 = charge(s, Cost(epsilon=F(1, 100), rho=F(1, 7)), order)
    assert refund(s2, Cost(epsilon=F(1, 100), rho=F(1, 7)), order) == s
    assert refund(Spent(), Cost(epsilon=F(1)), order) == Spent()  # never below zero
    # untracked (older ledger rows): read as sum epsilon + order sum rho, an upper bound
    legacy = Spent(Cost(epsilon=F(1, 2), rho=F(1, 100)), None)
    assert Filter.configure(F(1), MICRO, order).renyi(legacy) == F(1, 2) + order / 100
    assert charge(legacy, Cost(), None) == Spent(legacy.cost, None)


def test_invalid_settings() -> None:
    with pytest.raises(ValueError):
        Filter(F(1), MICRO, F(1))
    with pytest.raises(ValueError):
        Filter(F(1), MICRO, F(2), F(3, 2))


def test_documented_counts() -> None:
    """The examples of docs/budget.md on (1, 1e-6): 10 Laplace at 0.1; 127 Gaussian calibrated
    at (0.1, 1e-6) (96 under the old check); 1834 Laplace at 0.005, (R) smaller from the 99th
    (order 23.3 alone)."""
    f = Filter.configure(F(1), MICRO, F(233, 10))

    def count(cost: Cost) -> int:
        return len(_run(f, [cost] * 3000)[0])

    assert count(Cost(epsilon=F(1, 10))) == 10
    rho = epsilon_to_rho(F(1, 10), MICRO)
    assert count(Cost(rho=rho)) == 127
    assert max(k for k in range(200) if _old_rule([Cost(rho=rho)] * k, F(1), MICRO)) == 96
    assert count(Cost(epsilon=F(5, 1000))) == 1834
    s, first = Spent(), None
    for n in range(1, 200):
        s = f.add(s, Cost(epsilon=F(5, 1000)))
        if first is None and f.epsilon_spent(s) < s.cost.epsilon:
            first = n
    assert first == 99


def test_need_of_a_statement_s_releases_is_their_charge_one_by_one() -> None:
    """A statement reserves its ``auto`` bound choices and its answer as separate releases: what
    it needs is the increase of epsilon_spent after all of them, each with its own Renyi term
    (what EXPLAIN and the 53400 message state), not that of one release of their summed cost."""
    f = Filter.configure(F(10), F(1, 10**6))
    assert f.overhead is not None and f.order is not None
    spent = Spent(Cost(epsilon=F(9)), renyi=F(1))  # many small pure releases: (R) is smaller
    assert f.epsilon_spent(spent) == 1 + f.overhead < 9
    bound, answer = Cost(epsilon=F(1, 10)), Cost(epsilon=F(2, 5))
    need = f.need(spent, bound, answer)
    after = f.epsilon_spent(f.add(f.add(spent, bound), answer))
    assert after is not None and need == after - f.epsilon_spent(spent)
    assert need != f.need(spent, bound + answer)  # one release of 0.5 counts more under (R)
    assert f.need(Spent(), bound, answer) == F(1, 2)  # (P) on a fresh budget: the sum


def test_the_first_gaussian_release_no_longer_takes_the_main_order_s_conversion() -> None:
    """The demo's dataset budget (1000, 1e-3): its main order is 1.09 (the most rho over the whole
    budget), whose one-time conversion cost is about 80; with the more orders (2 .. 256) a first
    Gaussian release at epsilon 0.5, delta 1e-7 (rho 0.0038) after four pure releases of 1 uses
    about 0.31 (order 32: 32 rho + c(32, 1.56e-5) = 0.122 + 0.191), less than its own epsilon;
    the order alone (before: all of the delta) used 73.7. Hand-computed with mpmath: c(32, 5e-4 / 4 / 8)."""
    f = Filter.configure(F(1000), F(1, 1000))
    assert f.order is not None and 1 < f.order < 2
    assert f.more == tuple(F(2**k) for k in range(1, 9))
    pure = Spent()
    for _ in range(4):
        pure = f.add(pure, Cost(epsilon=F(1)))
    assert f.epsilon_spent(pure) == 4
    gauss = Cost(rho=epsilon_to_rho(F(1, 2), F(1, 10**7)))
    need = f.need(pure, gauss)
    assert need is not None
    by_hand = 32 * _m(gauss.rho) + _conversion(F(32), F(1, 1000) / 2 / 4 / 8)
    assert float(need) == pytest.approx(float(by_hand), abs=1e-9)
    assert 0.30 < need < F(1, 2)
    alone = Filter.configure(F(1000), F(1, 1000), f.order)  # the period's order, alone
    before = alone.need(pure, gauss)
    assert before is not None and before > 70
    # the main order still holds the most rho at the end: a budget's worth of rho 1 releases
    many = Spent()
    for _ in range(300):
        many = f.add(many, Cost(rho=F(1)))
    spent = f.epsilon_spent(many)
    assert spent is not None and f.overhead is not None
    assert spent == many.renyi + f.overhead  # the main order's (R)


def test_more_orders_at_the_whole_conversion_delta_fail_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Broken twin: every more order converting with the whole conversion delta (no union-bound
    split) admits Gaussian releases beyond the bound the split guarantees (checked from scratch
    with _within_bound); the filter as it is admits none."""
    f = Filter.configure(F(1), MICRO)
    offered = [Cost(rho=F(1, 2000))] * 400
    admitted, _ = _run(f, offered)
    assert all(_within_bound(admitted[:n], f) for n in range(len(admitted) + 1))
    monkeypatch.setattr(Filter, "conversion_delta", lambda self, order: self.delta_conversion)
    twin, _ = _run(replace(f), offered)  # a filter made under the patch: f computed its own once
    assert len(twin) > len(admitted) and not _within_bound(twin, f)


def _every_bound(f: Filter, spent: Spent, with_more: bool = True) -> F | None:
    """epsilon_spent by its definition, every option written out (the least of: the plain sum
    when no rho, the main order's Renyi bound, each more order's sum epsilon + a sum rho + c)."""
    options = [spent.cost.epsilon] if spent.cost.rho == 0 else []
    r = f.renyi(spent)
    if f.overhead is not None and r is not None:
        options.append(r + f.overhead)
    if f.delta_conversion > 0 and with_more:
        for o in f.more:
            c = renyi_conversion(o, f.conversion_delta(o))
            options.append(spent.cost.epsilon + o * spent.cost.rho + c)
    return min(options) if options else None


@settings(max_examples=150, deadline=None)
@given(f=budgets, offered=st.lists(costs, max_size=12))
def test_epsilon_spent_is_the_least_of_every_bound(f: Filter, offered: list[Cost]) -> None:
    """epsilon_spent skips the more orders' bounds of rho-free totals (each is the sum plus a
    conversion >= 0): the same value as every bound written out, pure or not."""
    spent = Spent()
    for c in offered:
        spent = f.add(spent, c)
        assert f.epsilon_spent(spent) == _every_bound(f, spent)


def test_every_bound_check_catches_dropping_the_more_orders() -> None:
    """The demo's dataset budget after a Gaussian release: its order 32 gives the least bound,
    so leaving the more orders out (for every total, not only rho-free ones) changes the value."""
    f = Filter.configure(F(1000), F(1, 1000))
    spent = f.add(Spent(), Cost(rho=epsilon_to_rho(F(1, 2), F(1, 10**7))))
    assert f.epsilon_spent(spent) == _every_bound(f, spent)
    # the broken twin: the more orders' bounds left out for every total, not only rho-free ones
    assert _every_bound(f, spent, with_more=False) != f.epsilon_spent(spent)


def test_a_budget_row_s_filter_is_built_once_per_setting() -> None:
    """BudgetRow.filter hands back one Filter per (limits, grants, order, share): its constants
    are computed once, not at every statement; equal to one built afresh."""
    lim = Limit("analyst", "a", F(100), F(1, 10**4), "none")
    first = BudgetRow(Spent(), F(0), F(0), 0, 0).filter(lim)
    assert BudgetRow(Spent(), F(0), F(0), 0, 0).filter(lim) is first
    assert first == Filter.configure(F(100), F(1, 10**4), None, lim.delta_share)
    stored = BudgetRow(Spent(), F(0), F(0), 0, 1, first.order, first.delta_share, first.more)
    assert stored.filter(lim) == first
    granted = BudgetRow(Spent(), F(5), F(0), 0, 1, first.order, first.delta_share, first.more)
    assert granted.filter(lim) == Filter(
        F(105), F(1, 10**4), first.order, lim.delta_share, first.more
    )
