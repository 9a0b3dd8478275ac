"""The stopping rule of one budget: a Renyi privacy filter, valid under fully adaptive composition.

A budget (epsilon_B, delta_B) is split when it is created: ``delta_explicit = share * delta_B`` for
the deltas that releases spend explicitly (partition selection) and ``delta_conversion`` (the rest)
for turning Renyi divergence into (epsilon, delta)-DP. Its Renyi order ``alpha`` is fixed then too
(policy ``renyi_order``, or :func:`dpsql.dp.accounting.default_order`). A release of cost
(epsilon_i, delta_i, rho_i) is admitted iff, with it, the totals satisfy

    sum delta_i <= delta_explicit                                                        (D)
    and [ sum r_i(alpha) <= epsilon_B - c(alpha, delta_conversion)                     (R)
          or (every rho_i = 0 and sum epsilon_i <= epsilon_B) ]                          (P)

with r_i(alpha) = min(epsilon_i, alpha epsilon_i^2 / 2) + alpha rho_i
(:func:`~dpsql.dp.accounting.renyi_divergence`) and c the RDP -> DP conversion of Canonne, Kamath
& Steinke 2020, Proposition 12 (:func:`~dpsql.dp.accounting.renyi_conversion`). The rule depends
only on the budget's configuration, never on the answers.

With more orders a_1..a_k beside alpha (:func:`extra_orders`, the default since session 22),
the conversion delta is split: alpha converts with ``MAIN_SHARE`` of it (c above at that delta)
and each a_j with an equal part delta_j of the rest, and (R) may also hold at any a_j:

    sum epsilon_i + a_j sum rho_i <= epsilon_B - c(a_j, delta_j)                         (R_j)

(the left side bounds sum r_i(a_j) from above, so it needs no running total of its own). Each
order's paths are bounded as (R)'s are below, each at its own delta_j; they add up by the union
bound to delta_conversion (as with a set of orders in an RDP filter: Lecuyer 2021, "Practical
Privacy Filters and Odometers with Renyi Differential Privacy", Section 4; Feldman & Zrnic
2021 for each order alone). Why: a large order converts cheaply while little rho is spent, so
the first Gaussian release of a period no longer moves a large budget by the main order's whole
conversion cost (77 of the demo's dataset budget of 1000 at order 1.09; now about 0.31 for
rho 0.0038 at order 32), while the main order still holds the most rho at the end.

Claim: every interaction this rule admits is (epsilon_B, delta_B)-DP, even when the analyst picks
each query and its cost after seeing earlier answers. Proof outline (docs/budget.md has it in
full): (1) each release with an explicit delta_i splits, for any pair of neighbours, into a
(1 - delta_i)-weighted "good" part whose divergences obey the bounds above and a delta_i part
(Kairouz, Oh & Viswanath 2015); since (D) holds on every path, the good parts carry all but
delta_explicit of the probability (the approximate-zCDP filter argument of Whitehouse, Ramdas,
Rogers & Wu 2023, at one order). (2) On the good parts, exp((alpha - 1)(L_t - sum r_i)) is a
nonnegative supermartingale in the privacy loss L_t (Feldman & Zrnic 2021, Theorem 3.1), so paths
that end inside (R) have E[exp((alpha - 1) L) ; R] <= exp((alpha - 1) B); the pointwise bound in
the proof of CKS20 Proposition 12 turns that into at most delta_conversion of hockey-stick
divergence at epsilon_B. With more orders the same holds for the paths that end inside each
(R_j), at delta_j: on such a path every prefix is inside (R_j) too (totals only grow), so the
process stopped before any release that would leave (R_j) is a filter at a_j that agrees with
this one on those paths. Paths that end inside (P) but outside every (R) are pure: |L| <= sum
epsilon_i <= epsilon_B everywhere, and add nothing. Together: delta_explicit + delta_conversion =
delta_B.

Units: :meth:`Filter.epsilon_spent` is the smallest epsilon_B under which the totals would pass
(R) or (P). A release is admitted iff its *need*, the increase of that quantity, is at most what
remains, and its explicit delta at most the explicit delta left.

>>> f = Filter(Fraction(1), Fraction(1, 10**6), Fraction(30), Fraction(1, 2))
>>> s = f.add(Spent(), Cost(epsilon=Fraction(1, 2)))
>>> f.epsilon_spent(s), f.admits(s)
(Fraction(1, 2), True)
>>> f.admits(f.add(s, Cost(rho=Fraction(1, 100))))    # 1/2 + 3/10 + c(30, 5e-7) > 1
False
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from dpsql.dp.accounting import (
    ZERO,
    Cost,
    cap_denominator,
    default_order,
    renyi_conversion,
    renyi_divergence,
)

# The share of a budget's delta reserved for explicit deltas when the policy does not say.
DEFAULT_DELTA_SHARE = Fraction(1, 2)

# More Renyi orders beside a budget's main one (the default order, chosen for the most Gaussian
# spending over the whole budget): each powers of two above it up to 256, with MAIN_SHARE of
# the conversion delta kept by the main order and the rest shared evenly by these. A large
# order converts cheaply while little rho is spent: on the demo's dataset budget (1000, 1e-3)
# the main order is 1.09, whose one-time conversion cost is 77 (the first Gaussian release of a
# period took that much of the shared budget); at order 32 it is 0.19, so the first Gaussian
# release at epsilon 0.5 (rho 0.0038) uses about 0.31. Later, when much rho is spent, the main
# order takes over. The union bound over the orders keeps the guarantee (module doc).
EXTRA_ORDERS = tuple(Fraction(2**k) for k in range(1, 9))
MAIN_SHARE = Fraction(3, 4)


def extra_orders(order: Fraction) -> tuple[Fraction, ...]:
    """The orders of :data:`EXTRA_ORDERS` above a budget's main ``order`` (a smaller one never
    converts more cheaply than the main one at the optimum it was chosen for)."""
    return tuple(o for o in EXTRA_ORDERS if o > order)


@dataclass(frozen=True)
class Spent:
    """A budget's running totals: the summed costs and the summed Renyi divergences at its order.

    ``renyi`` is None when it was not tracked (no order yet, or a ledger row older than the
    filter): :meth:`Filter.renyi` then uses sum epsilon + alpha sum rho, an upper bound.
    """

    cost: Cost = ZERO
    renyi: Fraction | None = Fraction(0)


@dataclass(frozen=True)
class Filter:
    """One budget's stopping rule (see the module docstring).

    Attributes:
        epsilon: epsilon_B, the limit including grants.
        delta: delta_B, the limit including grants.
        order: the Renyi order alpha, fixed for the budget's period; None when the budget has no
            delta for conversion (then only pure releases are admitted, by plain summation).
        delta_share: the share of ``delta`` reserved for explicit deltas.
        more: more orders (:func:`extra_orders`; fixed for the period as ``order`` is), each
            with its own share of the conversion delta: :meth:`conversion_delta`. Empty: the
            main order converts with all of it (a period begun before they existed, or a
            policy's own ``renyi_order``).
    """

    epsilon: Fraction
    delta: Fraction
    order: Fraction | None
    delta_share: Fraction = DEFAULT_DELTA_SHARE
    more: tuple[Fraction, ...] = ()

    def __post_init__(self) -> None:
        if self.order is not None and self.order <= 1:
            raise ValueError(f"a Renyi order must be > 1, not {self.order}")
        if not 0 <= self.delta_share <= 1:
            raise ValueError(f"the explicit delta share must be in [0, 1], not {self.delta_share}")
        if self.more and (self.order is None or min(self.more) <= 1):
            raise ValueError(f"more Renyi orders need a main one, each > 1: {self.more}")

    @classmethod
    def configure(
        cls,
        epsilon: Fraction,
        delta: Fraction,
        order: Fraction | None = None,
        delta_share: Fraction = DEFAULT_DELTA_SHARE,
    ) -> Filter:
        """A new budget's filter: the given order alone, or the default one for its main share
        of the conversion delta with :func:`extra_orders` beside it."""
        f = cls(Fraction(epsilon), Fraction(delta), None, Fraction(delta_share))
        if f.delta_conversion <= 0:
            return f
        if order is not None:
            return cls(f.epsilon, f.delta, Fraction(order), f.delta_share)
        main = default_order(f.epsilon, f.delta_conversion * MAIN_SHARE)
        return cls(f.epsilon, f.delta, main, f.delta_share, extra_orders(main))

    # The derived values below are functions of the (frozen) fields alone, computed once per
    # filter (cached_property writes the instance's __dict__: no field changes, equality and
    # hashing read the fields only): epsilon_spent runs a few times per statement over the
    # main order and each of ``more``, and each Fraction product, and each lookup of the
    # memoized renyi_conversion (a Fraction's hash is a modular inverse), cost microseconds.
    @cached_property
    def delta_explicit(self) -> Fraction:
        """The part of delta that releases may spend explicitly (sum of their deltas)."""
        return self.delta * self.delta_share

    @cached_property
    def delta_conversion(self) -> Fraction:
        """The part of delta that converts the Renyi bound to (epsilon, delta)-DP."""
        return self.delta - self.delta_explicit

    def conversion_delta(self, order: Fraction) -> Fraction:
        """The part of ``delta_conversion`` that ``order`` (the main one or one of ``more``)
        converts with: all of it without ``more``, else :data:`MAIN_SHARE` for the main order
        and the rest shared evenly by the others (together: delta_conversion)."""
        if not self.more:
            return self.delta_conversion
        if order == self.order:
            return self.delta_conversion * MAIN_SHARE
        return self.delta_conversion * (1 - MAIN_SHARE) / len(self.more)

    @cached_property
    def overhead(self) -> Fraction | None:
        """c(alpha, its conversion delta) of the main order, rounded up; None when no Renyi
        accounting is possible."""
        if self.order is None or self.delta_conversion <= 0:
            return None
        return renyi_conversion(self.order, self.conversion_delta(self.order))

    @property
    def orders_text(self) -> str | None:
        """The orders as the ledger stores them: the main one, then ``more``, space-separated."""
        if self.order is None:
            return None
        return " ".join(f"{o.numerator}/{o.denominator}" for o in (self.order, *self.more))

    def renyi(self, spent: Spent) -> Fraction | None:
        """sum r_i(alpha) of these totals (an upper bound when it was not tracked)."""
        return tracked_renyi(spent, self.order)

    def add(self, spent: Spent, cost: Cost) -> Spent:
        """The totals with one more release."""
        return charge(spent, cost, self.order)

    def epsilon_spent(self, spent: Spent) -> Fraction | None:
        """The smallest epsilon_B under which (R) or (P) holds; None if neither can (rho, no order).

        Pure totals count their epsilon sum (P); with Renyi accounting the sum of divergences plus
        the conversion overhead (R); the smaller of the two when both apply.
        """
        options = []
        pure = spent.cost.rho == 0
        if pure:
            options.append(spent.cost.epsilon)
        c, r = self.overhead, self.renyi(spent)
        if c is not None and r is not None:
            options.append(r + c)
        if not pure:  # with no rho, each is sum epsilon + c(a_j) >= sum epsilon: never the least
            for o, c_o in self._more_conversions:  # sum epsilon + o sum rho >= sum r_i(o): bound
                options.append(spent.cost.epsilon + o * spent.cost.rho + c_o)
        return min(options) if options else None

    @cached_property
    def _more_conversions(self) -> tuple[tuple[Fraction, Fraction], ...]:
        """(a_j, c(a_j, delta_j)) for each of ``more`` (none without a conversion delta); each
        c >= 0 (:func:`~dpsql.dp.accounting.renyi_conversion` never returns less)."""
        if self.delta_conversion <= 0:
            return ()
        return tuple((o, renyi_conversion(o, self.conversion_delta(o))) for o in self.more)

    def admits(self, spent: Spent) -> bool:
        """Whether these totals (the history plus the candidate release) pass the filter."""
        if spent.cost.delta > self.delta_explicit:
            return False
        eps = self.epsilon_spent(spent)
        return eps is not None and eps <= self.epsilon

    def epsilon_remaining(self, spent: Spent) -> Fraction:
        """What is left of epsilon_B (0 when the totals are outside the budget)."""
        eps = self.epsilon_spent(spent)
        return Fraction(0) if eps is None else max(Fraction(0), self.epsilon - eps)

    def need(self, spent: Spent, cost: Cost, *more: Cost) -> Fraction | None:
        """How much of epsilon_B a release would use: the increase of :meth:`epsilon_spent`;
        with ``more``: what the releases would use together, charged one after the other (a
        statement's ``auto`` bound choices and its answer: each release its own Renyi term).

        None when it can't be accounted at all (a zCDP release on a budget without Renyi order).
        """
        total = spent
        for c in (cost, *more):
            total = self.add(total, c)
        before, after = self.epsilon_spent(spent), self.epsilon_spent(total)
        if after is None:
            return None
        return max(Fraction(0), after - (before or Fraction(0)))


def tracked_renyi(spent: Spent, order: Fraction | None) -> Fraction | None:
    """sum r_i(order) of these totals; sum epsilon + order sum rho (an upper bound) if untracked."""
    if order is None:
        return None
    if spent.renyi is not None:
        return spent.renyi
    return spent.cost.epsilon + order * spent.cost.rho


def charge(spent: Spent, cost: Cost, order: Fraction | None) -> Spent:
    """The totals with one more release (Renyi part at ``order``; untracked without one)."""
    r = tracked_renyi(spent, order)
    if r is not None and order is not None:
        r = cap_denominator(r + renyi_divergence(cost, order))
    return Spent((spent.cost + cost).rounded_up(), r)


def refund(spent: Spent, cost: Cost, order: Fraction | None) -> Spent:
    """The totals without a refunded release (never below zero)."""
    r = tracked_renyi(spent, order)
    if r is not None and order is not None:
        r = cap_denominator(max(Fraction(0), r - renyi_divergence(cost, order)))
    return Spent((spent.cost - cost).rounded_up(), r)
