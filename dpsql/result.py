"""What the engine returns: typed columns and rows, ready for the wire encoder or the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ResultColumn:
    """One output column. ``type_oid``/``typmod`` are PostgreSQL's (as in RowDescription)."""

    name: str
    type_oid: int
    typmod: int = -1
    # For noisy columns: the mechanism and the half-width of the confidence interval (None when
    # the column is not noisy, e.g. a group key).
    mechanism: str | None = None
    half_width: float | None = None


@dataclass(frozen=True)
class IntervalFallback:
    """Why a statement's interval columns (``SET dpsql.show_intervals``) fell back: NULL with
    the reason in the notice, or none at all. ``expected``: a case dpsql knows has no honest
    interval (a shape its rewrite can't carry interval columns through, the interval ends'
    arithmetic failing on the values: PostgreSQL's data exceptions). Otherwise something dpsql
    did not expect (``error``: the exception, a bug to fix): the statement is still answered,
    the event is logged at ERROR with the statement's fingerprint, and tests assert none."""

    reason: str
    expected: bool
    error: str = ""


@dataclass(frozen=True)
class Result:
    """A statement's outcome. ``rows`` hold Python values (psycopg's loaders decoded them;
    the wire encodes each by its column's type); a value Python's types can't hold (an
    ``infinity`` date, an interval) is PostgreSQL's own text
    (:class:`dpsql.upstream.loaders.PgText`)."""

    columns: tuple[ResultColumn, ...]
    rows: list[tuple[object, ...]]
    command_tag: str
    notices: tuple[str, ...] = ()
    epsilon_spent: float = 0.0
    delta_spent: float = 0.0
    cached: bool = False
    intervals: list[tuple[tuple[float, float] | None, ...]] | None = field(default=None)
    # the interval columns' fallbacks, if any (:class:`IntervalFallback`)
    interval_fallbacks: tuple[IntervalFallback, ...] = ()
