"""What the policy says a release is charged to, and its per-query limits (no database).

The ledger reads these at each reservation; they are pure functions of the policy, so a policy
reload applies to the next release (a period's filter settings, once stored, do not change: see
:mod:`dpsql.budget.filter`).
"""

from __future__ import annotations

from fractions import Fraction

from dpsql.budget.records import Limit
from dpsql.dp.accounting import Cost, exact, rho_to_epsilon
from dpsql.errors import BudgetExhausted
from dpsql.policy.model import Budget, Policy


def limits(policy: Policy, analyst: str) -> tuple[Limit, ...]:
    """The budgets a release by ``analyst`` is charged to, in locking order.

    Raises:
        BudgetExhausted: the analyst has no budget in the policy.
    """
    who = policy.analysts.get(analyst)
    if who is None:
        raise BudgetExhausted(
            f"analyst {analyst!r} has no privacy budget in the policy",
            hint=f"add analysts.{analyst}.budget to the policy",
        )
    out = [to_limit("analyst", analyst, who.budget)]
    g = dataset_limit(policy)
    if g is not None:
        out.append(g)
    return tuple(sorted(out, key=lambda lim: (lim.kind, lim.name)))


def dataset_limit(policy: Policy) -> Limit | None:
    """The dataset's global budget (the sum over all analysts), if the policy sets one."""
    g = policy.budget
    return None if g is None else to_limit("dataset", policy.dataset, g)


def max_epsilon(policy: Policy, analyst: str) -> Fraction:
    """The per-query epsilon ceiling: the analyst's, else the policy default."""
    who = policy.analysts.get(analyst)
    m = who.max_epsilon if who is not None and who.max_epsilon is not None else None
    return exact(m if m is not None else policy.defaults.max_epsilon)


def default_delta(policy: Policy, analyst: str) -> Fraction:
    """The delta a Gaussian release is accounted at when the query sets none."""
    who = policy.analysts.get(analyst)
    d = who.default_delta if who is not None and who.default_delta is not None else None
    return exact(d if d is not None else policy.defaults.delta)


def query_epsilon(
    policy: Policy, analyst: str, cost: Cost, delta_for_rho: Fraction | None
) -> Fraction:
    """The epsilon of one release on its own (its rho converted at ``delta_for_rho``).

    Raises:
        BudgetExhausted: a Gaussian release with no usable delta.
    """
    if cost.rho == 0:
        return cost.epsilon
    d = default_delta(policy, analyst) if delta_for_rho is None else Fraction(delta_for_rho)
    if not 0 < d < 1:
        raise BudgetExhausted(
            "a Gaussian (zCDP) release needs a delta > 0 to be accounted",
            hint="SET dpsql.delta to a small value such as 1e-6, or use "
            "SET dpsql.mechanism = laplace",
        )
    return cost.epsilon + rho_to_epsilon(cost.rho, d)


def to_limit(kind: str, name: str, b: Budget) -> Limit:
    """A policy budget as a Limit (exact values; the filter's settings for new periods)."""
    order = None if b.renyi_order is None else exact(b.renyi_order)
    return Limit(
        kind, name, exact(b.epsilon), exact(b.delta), b.period, order, exact(b.explicit_delta_share)
    )
