"""Charging a release to the privacy ledger, and the progress display shared by both commands.

Protocol (as for queries, :mod:`dpsql.budget.ledger`): reserve the whole cost before the private
counting query runs; refund only if it fails before any noisy value exists; commit before any
output is written. A crash after the reservation leaves it counted as spent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from dpsql.dp.accounting import Cost

T = TypeVar("T")


class Charge:
    """One reservation on a ledger (or a no-op when ``ledger`` is None, for library use)."""

    def __init__(
        self,
        ledger: Any,
        analyst: str,
        cost: Cost,
        fingerprint: str,
        delta: Fraction,
        label: str,
        statement: str = "",
    ) -> None:
        self.ledger = ledger
        self.reservation = (
            ledger.reserve(
                analyst,
                cost,
                fingerprint,
                delta_for_rho=delta if cost.rho else None,
                mechanism=label,
                statement=statement,  # the analyst's dpsql.history shows it
            )
            if ledger is not None
            else None
        )

    @property
    def release_id(self) -> int | None:
        return None if self.reservation is None else int(self.reservation.id)

    def before_noise(self, fn: Callable[[], T]) -> T:
        """Run the private counting step; refund the reservation if it fails.

        Only failures that can't depend on the private data are refunded (see
        :func:`dpsql.budget.ledger.refundable`); any other failure stays charged.
        """
        try:
            return fn()
        except BaseException as error:
            if self.reservation is not None:
                self.ledger.refund(self.reservation, error=error)
            raise

    def commit(self) -> None:
        """Confirm the spend: call before anything is written."""
        if self.reservation is not None:
            self.ledger.commit(self.reservation)


class Steps:
    """A rich progress display: one bar over the named steps of a release."""

    def __init__(self, steps: list[str], console: Console | None, enabled: bool = True) -> None:
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
            disable=not enabled,
        )
        self.task = self.progress.add_task(steps[0] if steps else "", total=len(steps))

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        self.progress.update(self.task, description=name)
        yield
        self.progress.advance(self.task)

    def __enter__(self) -> Steps:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.update(self.task, description="done")
        self.progress.stop()
