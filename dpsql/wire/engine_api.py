"""What the wire server needs from the engine, and what it keeps of a parsed statement.

:class:`EngineAPI` is the engine's contract with the server (every engine, a test's fake too);
:class:`UpstreamEngine` adds what the server uses when the engine has an upstream PostgreSQL of
its own (the fast path, the upstream's identity, ``SET dpsql.epsilon``'s range check).
:class:`Statement` is one parsed statement (a session statement, or the engine's
:data:`~dpsql.execute.prepared.Prepared`); :func:`as_dpsql_error` turns any exception into an
error that is safe to send.

Parameter values cross the contract as ``object``: what :func:`dpsql.wire.encode.decode_param`
made of the client's bytes (``None``, ``int``, ``str``, ``Decimal``, ``date``, a list, ...);
the engine binds them as literals (:func:`dpsql.sql.bind.literal`) and refuses what it cannot.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol, runtime_checkable

import psycopg

from dpsql.budget.api import BudgetLedger
from dpsql.errors import DpsqlError, InternalError
from dpsql.errors.upstream import sanitized_upstream
from dpsql.execute.backend import Backend, CancelToken
from dpsql.execute.context import Executes
from dpsql.execute.prepared import Prepared
from dpsql.policy.model import Policy
from dpsql.result import ResultColumn
from dpsql.session import SessionContext
from dpsql.sql.prescan import too_complex
from dpsql.wire.copy_out import CopyStatement
from dpsql.wire.cursors import CursorStatement
from dpsql.wire.statements import SessionStatement

log = logging.getLogger("dpsql.wire.session")


class EngineAPI(Executes, Protocol):
    """The engine as the wire server calls it (:class:`dpsql.engine.Engine`; a test's fake).

    The calls block (the server runs them in worker threads) and are thread-safe. Every error
    is a :class:`~dpsql.errors.DpsqlError` carrying its SQLSTATE; anything else is a bug (XX000).
    """

    def prepare(self, text: str, analyst: str | None = None) -> Prepared:
        """Parse and classify one statement as ``analyst`` sees the policy (cached)."""
        ...

    def describe(
        self, prepared: Prepared, session: SessionContext, param_types: Sequence[int] = ()
    ) -> tuple[ResultColumn, ...]:
        """The result columns, reading no private data and spending no budget."""
        ...

    def split(self, text: str) -> list[str]:
        """A simple Query's text as its statements, in order."""
        ...


@runtime_checkable
class UpstreamEngine(EngineAPI, Protocol):
    """An engine with an upstream PostgreSQL the server may use as well (``isinstance`` tells).

    With one, public and catalog statements run on the server's own asynchronous pool
    (:mod:`dpsql.wire.fastpath`) from the SQL the engine renders for them.
    """

    @property
    def policy(self) -> Policy: ...

    @property
    def backend(self) -> Backend: ...

    @property
    def ledger(self) -> BudgetLedger | None: ...

    def check_epsilon(self, analyst_name: str, eps: Fraction) -> None:
        """Refuse (22023) a per-query epsilon outside the analyst's policy range."""
        ...

    def runnable_sql(
        self, prepared: Prepared, session: SessionContext, params: Sequence[object] = ()
    ) -> str:
        """The SQL a public or catalog statement runs upstream with ``params`` bound."""
        ...

    def cached_sql(
        self, prepared: Prepared, session: SessionContext, params: Sequence[object] = ()
    ) -> str | None:
        """:meth:`runnable_sql` when it is cheap, else None (never slow)."""
        ...

    def parameterized_sql(self, prepared: Prepared, session: SessionContext) -> str | None:
        """A public statement's SQL with its ``$n`` kept, when passing values is equivalent."""
        ...

    def close(self) -> None: ...


def new_cancel_token() -> CancelToken:
    return CancelToken()


@dataclass(frozen=True)
class Statement:
    """A statement ready to run: a session statement or an engine ``Prepared``, parsed once."""

    sql: str
    session: SessionStatement | None
    prepared: Prepared | None
    fingerprint: str
    # DECLARE / FETCH / MOVE / CLOSE (dpsql.wire.cursors); a DECLARE's ``prepared`` is its query's
    cursor: CursorStatement | None = None
    # COPY ... TO STDOUT (dpsql.wire.copy_out): ``prepared`` is its query's, answered as such
    copy: CopyStatement | None = None
    # "session", or the engine's kind: the label of the statement's log line and metrics (where
    # it runs is decided by the class of ``prepared``: dpsql.wire.requests.route)
    kind: str = field(init=False)

    def __post_init__(self) -> None:
        if self.session is not None or self.prepared is None:
            kind = "session"
        else:
            kind = self.prepared.kind
        object.__setattr__(self, "kind", kind)

    @property
    def param_count(self) -> int:
        return 0 if self.prepared is None else self.prepared.param_count


def as_dpsql_error(err: BaseException) -> DpsqlError:
    """Any exception as a DpsqlError safe to send: upstream text is withheld, bugs are XX000."""
    if isinstance(err, DpsqlError):
        return err
    if isinstance(err, psycopg.Error):
        return sanitized_upstream(err.sqlstate)
    if isinstance(err, RecursionError):  # a statement nested too deeply: no 10,000-line traceback
        log.warning("statement too complex: %s", err)
        return too_complex(err)
    log.exception("internal error", exc_info=err)
    return InternalError("internal error in dpsql", hint="report this to the dpsql operators")
