"""The ledger's records: budgets, reservations, stored totals, and the refusal they produce."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from dpsql.budget.format import fmt_down, fmt_up
from dpsql.budget.periods import period_end
from dpsql.dp.accounting import Cost
from dpsql.errors import BudgetExhausted


@dataclass(frozen=True)
class Limit:
    """One budget that a release is charged to: an analyst's or the whole dataset's."""

    kind: str  # "analyst" | "dataset"
    name: str
    epsilon: Fraction
    delta: Fraction
    period: str

    @property
    def label(self) -> str:
        return f"analyst {self.name}" if self.kind == "analyst" else f"dataset {self.name}"


@dataclass(frozen=True)
class Charged:
    """The budget row (and its reset generation) a reservation was charged to."""

    kind: str
    name: str
    period_start: datetime
    generation: int


@dataclass(frozen=True)
class Reservation:
    """A reserved release: spent until refunded."""

    id: int
    analyst: str
    cost: Cost
    fingerprint: str
    charged: tuple[Charged, ...]
    created_at: datetime


@dataclass(frozen=True)
class BudgetRow:
    """A budget row as stored: totals for one budget and period."""

    spent: Cost
    epsilon_granted: Fraction
    delta_granted: Fraction
    generation: int
    releases: int

    @classmethod
    def parse(cls, row: tuple[Any, ...]) -> BudgetRow:
        eps, delta, rho, geps, gdelta, generation, releases = row
        return cls(
            Cost(Fraction(eps), Fraction(delta), Fraction(rho)),
            Fraction(geps),
            Fraction(gdelta),
            int(generation),
            int(releases),
        )


def exhausted(
    analyst: str,
    lim: Limit,
    row: BudgetRow,
    cost: Cost,
    delta_for_rho: Fraction,
    now: datetime,
) -> BudgetExhausted:
    """The 53400 refusal: what the budget has left and what the query needs."""
    eps_limit = lim.epsilon + row.epsilon_granted
    delta_limit = lim.delta + row.delta_granted
    spent_eps = row.spent.epsilon_within(delta_limit)
    left_eps = max(Fraction(0), eps_limit - spent_eps) if spent_eps is not None else Fraction(0)
    left_delta = max(Fraction(0), delta_limit - row.spent.delta)
    need_eps, need_delta = (
        cost.as_approx_dp(delta_for_rho)
        if cost.rho
        else (
            cost.epsilon,
            cost.delta,
        )
    )
    end = period_end(lim.period, now)
    when = f" until {end:%Y-%m-%d %H:%M} UTC" if end else ""
    who = "you have" if lim.kind == "analyst" else f"the {lim.label} has"
    return BudgetExhausted(
        f"privacy budget exhausted: {who} epsilon {fmt_down(left_eps)} and delta "
        f"{fmt_down(left_delta)} left{when}; the query needs epsilon {fmt_up(need_eps)} and "
        f"delta {fmt_up(need_delta)}",
        detail=f"{lim.label} ({analyst} asked): limit epsilon {fmt_down(eps_limit)}, delta "
        f"{fmt_down(delta_limit)} per {lim.period if lim.period != 'none' else 'lifetime'};"
        f" spent epsilon {fmt_up(spent_eps or 0)}, delta {fmt_up(row.spent.delta)}, rho "
        f"{fmt_up(row.spent.rho)}",
        hint="lower SET dpsql.epsilon, repeat an earlier query (repeats are free), "
        + (f"wait for the budget to renew at {end:%Y-%m-%d %H:%M} UTC, " if end else "")
        + "or ask the administrator for a grant (dpsql budget grant)",
    )


def frac_text(x: Fraction) -> str:
    return f"{x.numerator}/{x.denominator}"


def cost_text(c: Cost) -> list[str]:
    return [frac_text(c.epsilon), frac_text(c.delta), frac_text(c.rho)]


# Failures that can't depend on the private data: the connection (before or regardless of the
# data), names and privileges checked at plan time, unsupported features, transaction state,
# authorization, unknown database/schema. Data exceptions (22), timeouts and cancels (57014),
# resource exhaustion (53) and anything unknown may reveal something about the data: not refunded.
_REFUNDABLE_CLASSES = frozenset({"08", "0A", "25", "28", "3D", "3F", "42"})


def refundable(error: BaseException) -> bool:
    """Whether a private query that raised ``error`` may have its reservation refunded.

    A refund makes the attempt free, so it is only safe when the failure itself says nothing
    about the private rows: ``1/(salary - 50000)`` raising division_by_zero, or a statement
    timeout, depends on the data and must stay charged.

    >>> from dpsql.errors import sanitized_upstream, QueryCanceled
    >>> refundable(sanitized_upstream("08006")), refundable(sanitized_upstream("22012"))
    (True, False)
    >>> refundable(QueryCanceled("canceled")), refundable(ValueError("bug"))
    (False, False)
    """
    from dpsql.errors import DpsqlError

    if not isinstance(error, DpsqlError):
        return False
    return error.sqlstate[:2] in _REFUNDABLE_CLASSES
