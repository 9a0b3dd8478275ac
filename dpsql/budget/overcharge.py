"""A statement charged to a budget more than its own epsilon says so, in a NOTICE.

Under Renyi accounting (docs/budget.md, "Units") the first Gaussian release of a period moves
a budget from pure summation to the Renyi bound and pays a conversion cost once: with a
policy's single ``renyi_order`` a statement at ``dpsql.epsilon = 0.5`` can use ~30-77 of the
dataset's epsilon, shared by every analyst (by default, with more orders, about its own
epsilon: :func:`dpsql.budget.filter.extra_orders`). The
ledger records what each reservation used of each budget (:attr:`Reservation.used`);
:func:`watching` collects the reservations a statement makes (the engine wraps each statement in
it) and :func:`notices` words those that used more than the statement's epsilon.

>>> from dpsql.dp.accounting import Cost
>>> from datetime import datetime, timezone
>>> r = Reservation(1, "ana", Cost(Fraction(0), Fraction(0), Fraction(1, 50)), "f", (),
...                 datetime(2026, 1, 1, tzinfo=timezone.utc),
...                 used=(("dataset", "demo", Fraction(2993, 100), True),))
>>> print(notices([r], 0.5)[0])  # doctest: +NORMALIZE_WHITESPACE
this statement used epsilon 29.93 of the dataset budget demo (its epsilon is 0.5): the first
Gaussian release of the period moves that budget to Renyi accounting and pays its one-time
conversion cost (docs/budget.md, "Units"); SHOW dpsql.budget shows what is left
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from fractions import Fraction

from dpsql.budget.format import fmt_down, fmt_up
from dpsql.budget.records import Reservation

_SEEN: ContextVar[list[Reservation] | None] = ContextVar("dpsql_reservations", default=None)


@contextmanager
def watching() -> Iterator[list[Reservation]]:
    """The reservations made inside (this thread's statement), in order."""
    got: list[Reservation] = []
    token = _SEEN.set(got)
    try:
        yield got
    finally:
        _SEEN.reset(token)


def seen(reservations: Sequence[Reservation]) -> None:
    """Called by the ledger once reservations are made (committed to the ledger's database)."""
    got = _SEEN.get()
    if got is not None:
        got.extend(reservations)


def notices(reservations: Sequence[Reservation], epsilon: float) -> tuple[str, ...]:
    """One sentence per budget that the statement's reservations used more of than ``epsilon``
    (the statement's own, all its releases together)."""
    used: dict[tuple[str, str], Fraction] = {}
    converted: set[tuple[str, str]] = set()
    for r in reservations:
        for kind, name, more, first in r.used:
            used[kind, name] = used.get((kind, name), Fraction(0)) + more
            if first:
                converted.add((kind, name))
    out = []
    own = Fraction(epsilon).limit_denominator(10**12)
    for (kind, name), more in used.items():
        if more <= own + Fraction(1, 10**9):
            continue
        why = (
            "the first Gaussian release of the period moves that budget to Renyi accounting "
            'and pays its one-time conversion cost (docs/budget.md, "Units")'
            if (kind, name) in converted
            else 'its Renyi accounting counts this release above its epsilon (docs/budget.md, "Units")'
        )
        out.append(
            f"this statement used epsilon {fmt_up(more)} of the {kind} budget {name} (its "
            f"epsilon is {fmt_down(own)}): {why}; SHOW dpsql.budget shows what is left"
        )
    return tuple(out)
