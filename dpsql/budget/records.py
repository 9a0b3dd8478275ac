"""The ledger's records: budgets, reservations, stored totals, and the refusal they produce."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from dpsql.budget.filter import DEFAULT_DELTA_SHARE, Filter, Spent
from dpsql.budget.format import fmt_down, fmt_up, fmt_up_beside
from dpsql.budget.periods import period_end
from dpsql.dp.accounting import Cost
from dpsql.errors import (
    BudgetExhausted,
    ConnectionException,
    DpsqlError,
    OperatorIntervention,
    UpstreamError,
)


@dataclass(frozen=True)
class Stored:
    """A stored answer found for a free repeat: its payload and the release it repeats (its id
    in ``dpsql.history``, when it was released, at what epsilon, and whether it was this
    analyst's own: with ``repeats: global`` it may be another analyst's on the dataset)."""

    payload: bytes
    release_id: int
    released_at: datetime
    epsilon: Fraction
    own: bool
    # the statement has contribution bounds chosen from the data, whose choice is charged as
    # releases of their own: the release's epsilon is its answer's share ('at epsilon 0.4'
    # read as wrong to a user who had set 0.5, newcomer24 #15)
    auto: bool = False

    def notice(self) -> str:
        """The free repeat's notice: a repeat, free, and of which release."""
        whose = "" if self.own else " (another analyst's: repeats are shared on this dataset)"
        share = (
            " for the answer (choosing its contribution bounds from the data is charged apart, "
            "as releases of their own)"
            if self.auto
            else ""
        )
        return (
            f"free repeat of release {self.release_id}{whose}, answered "
            f"{self.released_at:%Y-%m-%d %H:%M:%S} UTC at epsilon {fmt_up(self.epsilon)}{share}: "
            "the same answer again, no privacy budget spent (SELECT * FROM dpsql.history lists it)"
        )


@dataclass(frozen=True)
class Limit:
    """One budget that a release is charged to: an analyst's or the whole dataset's."""

    kind: str  # "analyst" | "dataset"
    name: str
    epsilon: Fraction
    delta: Fraction
    period: str
    renyi_order: Fraction | None = None  # the policy's, if it sets one
    delta_share: Fraction = DEFAULT_DELTA_SHARE

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
    # what it used of each budget: (kind, name, increase of epsilon_spent, whether it moved
    # the budget from pure to Renyi accounting), for the over-charge NOTICE (budget.overcharge)
    used: tuple[tuple[str, str, Fraction, bool], ...] = ()


@dataclass(frozen=True)
class BudgetRow:
    """A budget row as stored: totals for one budget and period, and its filter's settings.

    ``order`` and ``delta_share`` are fixed by the first release charged in the period (None
    before); ``spent.renyi`` is None in rows older than the filter (see :class:`Spent`).
    """

    spent: Spent
    epsilon_granted: Fraction
    delta_granted: Fraction
    generation: int
    releases: int
    order: Fraction | None = None
    delta_share: Fraction | None = None
    more: tuple[Fraction, ...] = ()  # the period's more orders (the ledger's renyi_order text)

    COLUMNS = (
        "epsilon_spent, delta_spent, rho_spent, epsilon_granted, delta_granted, generation,"
        " releases, renyi_spent, renyi_order, delta_share"
    )

    @classmethod
    def parse(cls, row: tuple[Any, ...]) -> BudgetRow:
        eps, delta, rho, geps, gdelta, generation, releases, renyi, order, share = row
        orders = [Fraction(o) for o in str(order).split()] if order is not None else []
        return cls(
            Spent(
                Cost(Fraction(eps), Fraction(delta), Fraction(rho)),
                None if renyi is None else Fraction(renyi),
            ),
            Fraction(geps),
            Fraction(gdelta),
            int(generation),
            int(releases),
            orders[0] if orders else None,
            None if share is None else Fraction(share),
            tuple(orders[1:]),
        )

    def filter(self, lim: Limit) -> Filter:
        """This period's filter: the stored order and share, else what the first release fixes.

        A new period takes the policy's ``renyi_order`` alone, or the default order for its
        limits (grants included) with :func:`~dpsql.budget.filter.extra_orders` beside it
        (:meth:`Filter.configure`), and the policy's ``explicit_delta_share``. A period begun
        with one order only keeps it alone.
        """
        share = lim.delta_share if self.delta_share is None else self.delta_share
        eps, delta = lim.epsilon + self.epsilon_granted, lim.delta + self.delta_granted
        return _filter(eps, delta, share, self.order, self.more, lim.renyi_order)


@functools.lru_cache(maxsize=256)
def _filter(
    eps: Fraction,
    delta: Fraction,
    share: Fraction,
    order: Fraction | None,
    more: tuple[Fraction, ...],
    policy_order: Fraction | None,
) -> Filter:
    """:meth:`BudgetRow.filter`'s filter, one instance per set of its inputs: a frozen Filter
    computes its constants once (its cached properties: the conversion overheads of its ~8
    orders, ~70 us of Fraction arithmetic and memo lookups), and a statement reads its budgets'
    rows afresh each time (2 filters per statement through the proxy: analyst and dataset)."""
    f = Filter(eps, delta, None, share)
    if f.delta_conversion <= 0:
        return f
    if order is not None:
        return Filter(eps, delta, order, share, more)
    return Filter.configure(eps, delta, policy_order, share)


@dataclass(frozen=True)
class BudgetStatus:
    """One row of ``dpsql.budget``."""

    budget: str  # "analyst" | "dataset"
    name: str
    period: str
    period_start: datetime | None
    period_end: datetime | None
    epsilon_limit: Decimal
    epsilon_spent: Decimal
    epsilon_remaining: Decimal
    delta_limit: Decimal
    delta_explicit_limit: Decimal
    delta_spent: Decimal
    delta_remaining: Decimal
    rho_spent: Decimal
    renyi_order: Decimal | None
    renyi_spent: Decimal | None
    releases: int


@dataclass(frozen=True)
class HistoryEntry:
    """One row of ``dpsql.history``: a release (or free repeat) by the analyst."""

    id: int
    released_at: datetime
    fingerprint: str
    mechanism: str
    epsilon: Decimal
    delta: Decimal
    rho: Decimal
    cached: bool
    state: str  # committed | reserved (never confirmed: counted) | refunded | repeat
    statement: str = ""  # the statement's text ("" for releases made before it was kept)
    # what the analyst got: 'answered', 'failed (SQLSTATE 22000): charged', 'canceled (SQLSTATE
    # 57014): charged', 'refunded', 'not confirmed: charged'; NULL for a release committed before
    # dpsql kept failures apart (ledger version 5)
    outcome: str | None = None


def exhausted(
    analyst: str,
    lim: Limit,
    row: BudgetRow,
    cost: Cost,
    now: datetime,
    more: Sequence[Cost] = (),
    min_epsilon: Fraction = Fraction(0),
) -> BudgetExhausted:
    """The 53400 refusal: what the budget has left (``row``: before the statement, as ``SHOW
    dpsql.budget`` says) and what the query needs, in its units: all of its releases (``cost``
    and ``more``: its ``auto`` bound choices and its answer, reserved together); its hint, the
    largest ``SET dpsql.epsilon`` the statement would pass this budget at now (``min_epsilon``:
    the analyst's smallest allowed)."""
    f = row.filter(lim)
    spent = f.epsilon_spent(row.spent)
    spent = f.epsilon if spent is None else spent
    left_eps = f.epsilon_remaining(row.spent)
    left_delta = max(Fraction(0), f.delta_explicit - row.spent.cost.delta)
    need = f.need(row.spent, cost, *more)
    releases = (cost, *more)
    cost = sum(more, cost)
    end = period_end(lim.period, now)
    when = f" until {end:%Y-%m-%d %H:%M} UTC" if end else ""
    who = "you have" if lim.kind == "analyst" else f"the {lim.label} has"
    # "analyst analyst (analyst asked)", then "your budget (analyst analyst)", read as a typo
    # when the analyst is named "analyst" (newcomer24 #12): the name is quoted, as a name
    whose = (
        f'your budget (analyst "{lim.name}")'
        if lim.kind == "analyst"
        else f"{lim.label} ({analyst} asked)"
    )
    if need is None:
        needs = "the query adds Gaussian noise, which needs a budget with delta for it"
    else:
        needs = f"the query needs epsilon {fmt_up(need)} and delta {fmt_up(cost.delta)}"
    why = ""
    if need is not None and cost.rho == 0 and need < cost.epsilon:
        # a statement at epsilon 5 "needs 4.712" (newcomer23 #19): the filter's count, not a typo
        needs += (
            f" (its releases add up to epsilon {fmt_up(cost.epsilon)}; the budget counts them "
            f"as {fmt_up(need)} of what is left, as its privacy filter composes many releases "
            'for less than their sum: docs/budget.md, "The privacy filter")'
        )
    if need is not None and cost.rho > 0 and row.spent.cost.rho == 0 and f.overhead is not None:
        why = (
            "; what the query needs includes the one-time conversion cost that the period's "
            f"first Gaussian release pays (at most epsilon {fmt_up(f.overhead)})"
        )
    per = f"per {lim.period}" if lim.period != "none" else "in all"
    gauss = ""
    if row.spent.cost.rho > 0 or cost.rho > 0:
        # the Renyi order is the accounting's term (docs/budget.md explains it): say what it does
        gauss = (
            f", and Gaussian noise of rho {fmt_up(row.spent.cost.rho)} (Gaussian answers are "
            "counted against epsilon by a conversion fixed when the budget first paid for one: "
            'docs/budget.md, "The privacy filter")'
        )
    # one story with SHOW dpsql.budget (newcomer25 #12): the budget's delta, the part for
    # partition selection, and the rest, the privacy filter's
    rest = f.delta - f.delta_explicit
    other = f", the other {fmt_down(rest)} the privacy filter's" if rest > 0 else ""
    lower = "lower SET dpsql.epsilon, "
    if left_eps > 0 and need is not None and cost.rho == 0:
        lower = _passing(f, row, releases, min_epsilon)
    return BudgetExhausted(
        f"privacy budget exhausted: {who} epsilon {fmt_down(left_eps)} left, and delta "
        f"{fmt_down(left_delta)} for partition selection{when}; {needs}",
        detail=f"{whose}: epsilon {fmt_down(f.epsilon)} and delta "
        f"{fmt_down(f.delta)} {per} ({fmt_down(f.delta_explicit)} of that delta for "
        f"partition selection{other}); spent so far: epsilon "
        f"{fmt_up_beside(spent, fmt_down(left_eps))}, delta "
        f"{fmt_up(row.spent.cost.delta)} for partition selection{gauss}{why}",
        hint=(
            # at 0 left no smaller epsilon is answered (newcomer24 #19: it still said "lower")
            lower if left_eps > 0 else "nothing is left for a new answer at any epsilon: "
        )
        + "repeat an earlier query (repeats are free), "
        + ("use SET dpsql.mechanism = laplace, " if cost.rho > 0 and left_eps > 0 else "")
        + (f"wait for the budget to renew at {end:%Y-%m-%d %H:%M} UTC, " if end else "")
        + "or ask the administrator for a grant (dpsql budget grant)",
    )


def _passing(f: Filter, row: BudgetRow, costs: Sequence[Cost], min_epsilon: Fraction) -> str:
    """The hint's first words: the largest ``SET dpsql.epsilon`` (3 significant digits, rounded
    down, checked exactly) at which the refused statement would pass this budget's filter now
    (newcomer25 #12: "needs epsilon 0.170952 ... counts them as ..." left the analyst to guess).
    A statement's releases (its ``auto`` bound choices, its answer) each take a fixed share of
    its epsilon, so asking at ``e`` scales each pure release's epsilon by ``e`` over their sum;
    their deltas (partition selection) stay. Read from the ledger's totals, never the data."""
    total = sum((c.epsilon for c in costs), Fraction(0))
    if total <= 0 or any(c.rho for c in costs):
        return "lower SET dpsql.epsilon, "

    def fits(e: Fraction) -> bool:
        spent = row.spent
        for c in costs:
            spent = f.add(spent, Cost(c.epsilon * e / total, c.delta, c.rho))
        return f.admits(spent)

    if fits(total):  # (it passes as asked: no number to offer)
        return "lower SET dpsql.epsilon, "
    if not fits(min_epsilon or Fraction(1, 10**9)):
        return (
            "no SET dpsql.epsilon this statement may use fits what is left (its smallest, "
            f"{fmt_up(min_epsilon)}, does not): "
        )
    lo, hi = float(min_epsilon), float(total)
    for _ in range(30):  # (fits is monotone in e: more epsilon, more of each release's cost)
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fits(Fraction(mid)) else (lo, mid)
    e = _down3(Fraction(lo))
    while e > min_epsilon and not fits(e):
        e = _down3(e * Fraction(999, 1000))
    if e < min_epsilon or not fits(e):
        return "lower SET dpsql.epsilon, "
    return f"SET dpsql.epsilon = {fmt_down(e)} or lower would pass now, "


def _down3(x: Fraction) -> Fraction:
    """``x`` rounded down to 3 significant digits (0.170952 -> 0.17, 0.0489 -> 0.0489)."""
    if x <= 0:
        return Fraction(0)
    k = math.floor(math.log10(x)) - 2
    step = Fraction(10) ** k
    return (x // step) * step


def frac_text(x: Fraction) -> str:
    return f"{x.numerator}/{x.denominator}"


def cost_text(c: Cost) -> list[str]:
    return [frac_text(c.epsilon), frac_text(c.delta), frac_text(c.rho)]


def opt_text(x: Fraction | None) -> str | None:
    return None if x is None else frac_text(x)


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

    >>> from dpsql.errors import QueryCanceled
    >>> from dpsql.errors.upstream import sanitized_upstream
    >>> refundable(sanitized_upstream("08006")), refundable(sanitized_upstream("22012"))
    (True, False)
    >>> refundable(QueryCanceled("canceled")), refundable(ValueError("bug"))
    (False, False)

    A refusal dpsql decided before anything ran on the private rows (:func:`before_the_data`) is
    refunded whatever its class: 55000 "the key ... was dropped or changed while the statement
    was being planned" is read from the catalog alone.
    """
    if not isinstance(error, DpsqlError):
        return False
    return error.before_data or error.sqlstate[:2] in _REFUNDABLE_CLASSES


SPENT_NOTE = (
    "The privacy budget reserved for this statement stays spent: whether and when a private "
    "query fails (a data error, a timeout, a cancel, whoever sent it) can depend on the private "
    'rows, so the failure counts as a release (docs/budget.md, "Crash safety"); '
    "SELECT * FROM dpsql.history shows the charge."
)


def say_spent(error: BaseException) -> None:
    """Tell the analyst that a failed statement's budget stays spent, and why (appended to the
    error's detail, once), when its reservation was confirmed instead of refunded.

    >>> from dpsql.errors import QueryCanceled
    >>> e = QueryCanceled("canceling statement due to user request")
    >>> say_spent(e); say_spent(e)
    >>> e.detail.count("stays spent")
    1
    """
    if isinstance(error, DpsqlError) and SPENT_NOTE not in (error.detail or ""):
        error.detail = f"{error.detail} {SPENT_NOTE}" if error.detail else SPENT_NOTE


@contextmanager
def before_the_data() -> Iterator[None]:
    """Marks dpsql's own refusals raised inside as decided before anything ran on the private
    rows (:attr:`~dpsql.errors.DpsqlError.before_data`), so that a reservation made for the
    statement is refunded (:func:`refundable`). Only for code that sends nothing to run on the
    private rows (catalog reads, zero-row probes, SQL building). PostgreSQL's own errors keep
    their class's rule (a probe's data exception, a timeout: :class:`UpstreamError`,
    57014), and so do lost connections.

    >>> from dpsql.errors import ObjectNotInPrerequisiteState
    >>> try:
    ...     with before_the_data():
    ...         raise ObjectNotInPrerequisiteState("the key was dropped")
    ... except ObjectNotInPrerequisiteState as e:
    ...     (e.sqlstate, refundable(e))
    ('55000', True)
    """
    try:
        yield
    except DpsqlError as e:
        if not isinstance(e, UpstreamError | OperatorIntervention | ConnectionException):
            e.before_data = True
        raise
