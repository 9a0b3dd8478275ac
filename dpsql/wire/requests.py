"""What the query protocol (:mod:`dpsql.wire.protocol`) asks of its driver, and where it writes.

The protocol yields one of the requests below and is sent the reply (or has the request's error
thrown into it); it writes backend messages to an :class:`Outbox`. :func:`route` is the one place
that decides where a statement runs, the fast path included.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final, NamedTuple
from typing import Protocol as TypingProtocol

from dpsql.errors import DpsqlError
from dpsql.execute.prepared import (
    CatalogQuery,
    DeferredQuery,
    EmptyQuery,
    PrivateQuery,
    PublicQuery,
    SessionCommand,
    TreeQuery,
)
from dpsql.wire.engine_api import Statement


class Outbox(TypingProtocol):
    """Where the protocol writes encoded backend messages (the connection's send buffer)."""

    def send(self, data: bytes) -> None: ...

    @property
    def should_flush(self) -> bool: ...


class Buffer:
    """An :class:`Outbox` that keeps what is sent (tests; a driver without a connection)."""

    def __init__(self, flush_at: int = 256 * 1024) -> None:
        self.sent: list[bytes] = []
        self.size = 0
        self._flush_at = flush_at

    def send(self, data: bytes) -> None:
        self.sent.append(data)
        self.size += len(data)

    @property
    def should_flush(self) -> bool:
        return self.size >= self._flush_at

    def take(self) -> list[bytes]:
        out, self.sent, self.size = self.sent, [], 0
        return out


# ---- requests to the driver ---------------------------------------------------------------------
class Route(Enum):
    """Where a statement runs (decided by :func:`route`)."""

    SESSION = "session"  # SET / SHOW / BEGIN ...: the session state (Protocol.apply_session)
    EMPTY = "empty"  # an empty statement: nothing runs
    UPSTREAM = "upstream"  # public / catalog: the upstream directly, on the event loop
    ENGINE = "engine"  # the engine, in a worker thread
    PRIVATE = "private"  # the engine, answered at a data-independent moment (timing padding)


# Route's members as module constants, for the per-statement paths: on Python 3.11 every read
# of an attribute of an Enum class (``Route.EMPTY``) takes the slow path of EnumType.__getattr__'s
# hook (about 0.3 us, ten times a global's; gone in 3.12).
ROUTE_SESSION: Final = Route.SESSION
ROUTE_EMPTY: Final = Route.EMPTY
ROUTE_UPSTREAM: Final = Route.UPSTREAM
ROUTE_ENGINE: Final = Route.ENGINE
ROUTE_PRIVATE: Final = Route.PRIVATE


@dataclass(frozen=True, slots=True)
class Split:
    """Split a simple Query's text into statements. Reply: ``list[str]``."""

    sql: str


@dataclass(frozen=True, slots=True)
class Prepare:
    """Parse and check one statement's text. Reply: :class:`Statement`."""

    sql: str


@dataclass(frozen=True, slots=True)
class DescribeColumns:
    """An engine statement's result columns, without running it. Reply: its columns."""

    statement: Statement
    param_types: tuple[int, ...]  # as declared in Parse (0: unspecified)


class Run(NamedTuple):  # a tuple: made once per statement run, on the hot path
    """Run a statement. Reply: a :class:`Result` (or the :class:`Outcome` of a session
    statement, from :meth:`Protocol.apply_session`).

    ``formats``: the result formats the client asked for, when known before running (then
    PostgreSQL's bytes may be passed through); None when they are not.
    """

    statement: Statement
    params: tuple[object, ...]
    formats: tuple[int, ...] | None
    route: Route


@dataclass(frozen=True, slots=True)
class Flush:
    """Write what the outbox holds to the client. ``ready``: a ReadyForQuery was just queued
    (the driver may give a large statement's memory back first)."""

    ready: bool = False


Request = Split | Prepare | DescribeColumns | Run | Flush
Steps = Generator[Request, Any, None]


@dataclass(frozen=True, slots=True)
class Malformed:
    """A frame the driver could not decode into a message: its type byte and the error."""

    code: bytes
    error: DpsqlError


def route(stmt: Statement, fast_path: bool) -> Route:
    """Where ``stmt`` runs, by the class of what the engine prepared: the one place that
    chooses the fast path."""
    if stmt.session is not None:
        return ROUTE_SESSION
    match stmt.prepared:
        case None | SessionCommand():
            return ROUTE_SESSION
        case EmptyQuery():
            return ROUTE_EMPTY
        case PrivateQuery() | TreeQuery() | DeferredQuery():
            return ROUTE_PRIVATE
        case PublicQuery() | CatalogQuery() if fast_path and not _signals(stmt.prepared.text):
            return ROUTE_UPSTREAM
        case _:  # EXPLAIN, the ledger's views, public and catalog without the fast path
            return ROUTE_ENGINE


def _signals(text: str) -> bool:
    """A statement calling ``pg_cancel_backend`` / ``pg_terminate_backend``: the engine sends
    the signals to the analyst's other sessions before it runs
    (``dpsql.execute.public_sql.signalling_sql``), which the fast path would not."""
    low = text.lower()
    return "pg_cancel_backend" in low or "pg_terminate_backend" in low


def uniform(formats: Sequence[int] | None) -> int | None:
    """The one result format of every column (none given: text), or None (mixed, or unknown).

    >>> uniform(()), uniform((1,)), uniform((1, 1)), uniform((0, 1)), uniform(None)
    (0, 1, 1, None, None)
    """
    if formats is None:
        return None
    if not formats:
        return 0
    first = formats[0]
    if first not in (0, 1):
        return None
    return first if len(formats) == 1 or all(f == first for f in formats) else None
