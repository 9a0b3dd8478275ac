"""Privacy accounting: conversions against published values, composition, conservative rounding."""

from __future__ import annotations

from fractions import Fraction as F

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.dp.accounting import (
    Cost,
    cap_denominator,
    default_order,
    epsilon_to_rho,
    exact,
    gaussian_rho,
    parallel,
    pure_to_rho,
    renyi_conversion,
    renyi_divergence,
    rho_to_epsilon,
    sequential,
)

mpmath.mp.dps = 60
GRID = F(1, 10**12)


def _m(x: F) -> mpmath.mpf:
    return mpmath.mpf(x.numerator) / x.denominator


def _bs(rho: F, delta: F) -> mpmath.mpf:
    """Bun & Steinke 2016, Proposition 1.3, at 60 digits: rho + 2 sqrt(rho ln(1/delta))."""
    r, d = _m(rho), _m(delta)
    return r + 2 * mpmath.sqrt(r * mpmath.log(1 / d))


def test_published_rho_half_delta_1e6() -> None:
    # Bun & Steinke 2016 Prop. 1.3: rho = 0.5, delta = 1e-6 gives epsilon = 5.7565...
    eps = rho_to_epsilon(F(1, 2), F(1, 10**6))
    assert float(eps) == pytest.approx(5.756521769, abs=1e-9)
    assert _m(eps) >= _bs(F(1, 2), F(1, 10**6))  # rounded up, never down
    assert _m(eps - GRID) < _bs(F(1, 2), F(1, 10**6))  # ... by less than one grid step


@pytest.mark.parametrize(
    ("rho", "delta", "expected"),
    [
        # (rho, delta) -> epsilon = rho + 2 sqrt(rho ln 1/delta), values of the closed form
        (F(1, 2), F(1, 10**5), 5.298418),  # 0.5 + 2 sqrt(0.5 * 11.5129)
        (F(1), F(1, 10**5), 7.786140),
        (F(263, 100), F(1, 10**10), 18.194),  # Census 2020 PL rho with BS (tight: 17.14)
        (F(1, 1000), F(1, 10**9), 0.288912),
    ],
)
def test_published_conversions(rho: F, delta: F, expected: float) -> None:
    eps = rho_to_epsilon(rho, delta)
    assert float(eps) == pytest.approx(expected, rel=1e-4)
    assert _m(eps) >= _bs(rho, delta) and _m(eps - GRID) < _bs(rho, delta)


def test_epsilon_to_rho_published_and_conservative() -> None:
    # eps = 1, delta = 1e-6: rho = (sqrt(L + 1) - sqrt(L))^2 with L = ln 1e6, about 0.0174689
    rho = epsilon_to_rho(F(1), F(1, 10**6))
    assert float(rho) == pytest.approx(0.0174689, rel=1e-5)
    assert rho_to_epsilon(rho, F(1, 10**6)) <= 1
    assert rho_to_epsilon(rho + 2 * GRID, F(1, 10**6)) > 1 - F(1, 10**9)


def test_pure_and_gaussian_maps() -> None:
    assert pure_to_rho(F(1)) == F(1, 2)  # BS16 Prop. 1.4
    assert pure_to_rho(F(1, 10)) == F(1, 200)
    assert gaussian_rho(F(1), F(1)) == F(1, 2)  # Delta^2 / (2 sigma^2), BS16 Prop. 1.6
    assert gaussian_rho(F(3), F(2)) == F(9, 8)
    with pytest.raises(ValueError):
        gaussian_rho(F(1), F(0))


def test_many_gaussian_releases_cost_less_than_naive_sum() -> None:
    delta = F(1, 10**6)
    one = epsilon_to_rho(F(1, 2), delta)
    total = sequential([Cost(rho=one)] * 100)
    assert total.rho == 100 * one
    eps, d = total.as_approx_dp(delta)
    assert d == delta
    assert eps < 100 * F(1, 2) / 4  # about sqrt(100) instead of 100 times one release
    assert _m(eps) >= _bs(100 * one, delta)


def test_single_release_as_approx_dp() -> None:
    c = Cost(epsilon=F(1), delta=F(1, 10**6), rho=F(1, 100))
    assert c.as_approx_dp(F(1, 10**6)) == (
        1 + rho_to_epsilon(F(1, 100), F(1, 10**6)),
        F(2, 10**6),
    )
    assert Cost(epsilon=F(2)).as_approx_dp(F(1, 10**6)) == (2, 0)


def _cks(order: F, delta: F) -> mpmath.mpf:
    """CKS20 Proposition 12 at 60 digits: (ln 1/delta + (a-1) ln(1-1/a) - ln a) / (a-1)."""
    a, d = _m(order), _m(delta)
    return (mpmath.log(1 / d) + (a - 1) * mpmath.log(1 - 1 / a) - mpmath.log(a)) / (a - 1)


@pytest.mark.parametrize(
    ("order", "delta", "expected"),
    [
        # hand-checked: (ln 1e6 + 29 ln(29/30) - ln 30) / 29 = (13.81551 - 0.98314 - 3.40120) / 29
        (F(30), F(1, 10**6), 0.325212696),
        (F(2), F(1, 10**5), 10.126631104),  # ln 1e5 + ln(1/2) - ln 2 = 11.51293 - 1.38629
        (F(233, 10), F(1, 2 * 10**6), 0.465559523),
        (F(439, 100), F(5, 10**6), 2.905731791),
    ],
)
def test_renyi_conversion_values(order: F, delta: F, expected: float) -> None:
    c = renyi_conversion(order, delta)
    assert float(c) == pytest.approx(expected, abs=1e-9)
    assert _m(c) >= _cks(order, delta) > _m(c - GRID)  # rounded up, by less than one step
    # tighter than Mironov 2017 (ln(1/delta) / (alpha - 1)), never negative
    assert _m(c) < mpmath.log(1 / _m(delta)) / (_m(order) - 1)
    assert renyi_conversion(F(1000), F(9, 10)) == 0


def test_renyi_divergence_per_release() -> None:
    a = F(10)
    assert renyi_divergence(Cost(epsilon=F(1, 10)), a) == F(1, 20)  # a eps^2 / 2 < eps
    assert renyi_divergence(Cost(epsilon=F(1)), a) == 1  # eps < a eps^2 / 2
    assert renyi_divergence(Cost(rho=F(1, 100)), a) == F(1, 10)  # a rho
    assert renyi_divergence(Cost(epsilon=F(1, 10), delta=F(1, 10**6), rho=F(1, 100)), a) == F(
        3, 20
    )  # the explicit delta is accounted apart
    with pytest.raises(ValueError):
        renyi_divergence(Cost(), F(1))
    for bad in (F(1), F(1, 2)):
        with pytest.raises(ValueError):
            renyi_conversion(bad, F(1, 10**6))
    with pytest.raises(ValueError):
        renyi_conversion(F(2), F(0))


def test_default_order() -> None:
    # three significant digits of the best order (the closed form with Mironov's conversion,
    # (L + sqrt(L^2 + eps L)) / eps, would give 29.1, 4.93, 1.132: CKS20 shifts the optimum)
    assert default_order(F(1), F(1, 10**6)) == 22
    assert default_order(F(7), F(5, 10**6)) == F(439, 100)
    assert default_order(F(1000), F(1, 10**6)) == F(1131, 1000)
    for eps, delta in [
        (F(1, 10), F(1, 10**9)),
        (F(10), F(1, 10**5)),
        (F(50), F(1, 3)),
        (F(1), F(1, 10**6)),
    ]:
        # rho the budget holds at order a, with the exact conversion
        def held(a: F, eps: F = eps, delta: F = delta) -> mpmath.mpf:
            return (_m(eps) - _cks(a, delta)) / _m(a)

        # the default is within 0.5% of the best of a fine geometric grid of orders (1.001 .. 10^5)
        top = max(held(1 + F(10 ** (k / 100)).limit_denominator(10**6)) for k in range(-300, 500))
        assert held(default_order(eps, delta)) >= 0.995 * top
    with pytest.raises(ValueError):
        default_order(F(0), F(1, 10**6))


def test_parallel_is_componentwise_max() -> None:
    got = parallel([Cost(F(1), F(0), F(1, 4)), Cost(F(1, 2), F(1, 10**6), F(1, 2))])
    assert got == Cost(F(1), F(1, 10**6), F(1, 2))
    assert parallel([]) == Cost()


def test_cost_validation_and_arithmetic() -> None:
    with pytest.raises(ValueError):
        Cost(epsilon=F(-1))
    with pytest.raises(ValueError):
        Cost(delta=F(1))
    with pytest.raises(ValueError):
        Cost(rho=F(-1, 2))
    assert Cost(epsilon=1).epsilon == F(1)  # type: ignore[arg-type]
    assert Cost(epsilon=F(1), rho=F(1)) - Cost(epsilon=F(2)) == Cost(rho=F(1))
    assert Cost().is_free and not Cost(delta=F(1, 10**9)).is_free


def test_exact_reads_the_decimal_written() -> None:
    assert exact(0.1) == F(1, 10)
    assert exact(1e-6) == F(1, 10**6)
    assert exact(2) == 2 and exact("3/7") == F(3, 7)
    with pytest.raises(ValueError):
        exact(float("nan"))


def test_round_up_bounds_denominators_against_the_analyst() -> None:
    x = F(1, 3) + F(1, 10**40 + 7)
    r = cap_denominator(x)
    assert r >= x and r - x <= F(1, 10**30) and r.denominator <= 10**30
    assert cap_denominator(F(1, 7)) == F(1, 7)


def test_conversion_arguments_are_checked() -> None:
    assert rho_to_epsilon(F(0), F(1, 10**6)) == 0
    for bad in (F(0), F(1), F(2)):
        with pytest.raises(ValueError):
            rho_to_epsilon(F(1, 10), bad)
        with pytest.raises(ValueError):
            epsilon_to_rho(F(1), bad)
    assert epsilon_to_rho(F(0), F(1, 10**6)) == 0


fractions = st.fractions(min_value=F(1, 10**6), max_value=F(50))
deltas = st.sampled_from([F(1, 10**k) for k in range(2, 13)] + [F(3, 10**7), F(1, 3)])


@settings(max_examples=200, deadline=None)
@given(rho=fractions, delta=deltas)
def test_rho_to_epsilon_is_an_upper_bound(rho: F, delta: F) -> None:
    eps = rho_to_epsilon(rho, delta)
    true = _bs(rho, delta)
    assert true <= _m(eps) < true + _m(2 * GRID)


@settings(max_examples=200, deadline=None)
@given(eps=fractions, delta=deltas)
def test_epsilon_to_rho_round_trip_is_conservative(eps: F, delta: F) -> None:
    rho = epsilon_to_rho(eps, delta)
    assert rho >= 0
    assert rho_to_epsilon(rho, delta) <= eps
    # and not wastefully small: the exact inverse is within a few grid steps
    L = mpmath.log(1 / _m(delta))
    exact_rho = (mpmath.sqrt(L + _m(eps)) - mpmath.sqrt(L)) ** 2
    assert exact_rho - _m(rho) < _m(10 * GRID) * (1 + exact_rho * 100)


@settings(max_examples=100, deadline=None)
@given(a=fractions, b=fractions, delta=deltas)
def test_monotone(a: F, b: F, delta: F) -> None:
    lo, hi = sorted((a, b))
    assert rho_to_epsilon(lo, delta) <= rho_to_epsilon(hi, delta)
    assert rho_to_epsilon(lo + hi, delta) <= rho_to_epsilon(lo, delta) + rho_to_epsilon(hi, delta)


def test_doctests() -> None:
    import doctest

    import dpsql.budget.filter
    import dpsql.budget.format
    import dpsql.budget.periods
    import dpsql.budget.records
    import dpsql.dp.accounting
    import dpsql.sql.canonical

    mods = [dpsql.dp.accounting, dpsql.budget.format, dpsql.budget.periods, dpsql.budget.records]
    mods.append(dpsql.budget.filter)
    for mod in [*mods, dpsql.sql.canonical]:
        assert doctest.testmod(mod).failed == 0, mod.__name__


def test_refundable_only_for_data_independent_failures() -> None:
    from dpsql.budget.ledger import refundable
    from dpsql.errors import InternalError, QueryCanceled, UndefinedTable
    from dpsql.errors.upstream import sanitized_upstream

    assert refundable(UndefinedTable("relation x does not exist"))
    assert refundable(sanitized_upstream("08006"))  # connection lost
    assert refundable(sanitized_upstream("42883"))  # function does not exist (plan time)
    for data_dependent in ("22012", "22P02", "22003", "53200", "XX000", "40001"):
        assert not refundable(sanitized_upstream(data_dependent)), data_dependent
    assert not refundable(QueryCanceled("statement timeout"))
    assert not refundable(InternalError("bug"))
    assert not refundable(KeyboardInterrupt())
