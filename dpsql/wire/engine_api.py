"""What the wire server needs from the engine, and what it keeps of a parsed statement.

:class:`EngineLike` is the engine's contract with the server; :class:`Statement` is one parsed
statement (a session statement, or the engine's ``Prepared``); :func:`as_dpsql_error` turns any
exception into an error that is safe to send.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg

from dpsql.errors import DpsqlError, InternalError, sanitized_upstream
from dpsql.result import Result, ResultColumn
from dpsql.session import SessionContext
from dpsql.sql.prescan import too_complex
from dpsql.wire.statements import SessionStatement

log = logging.getLogger("dpsql.wire.session")


class EngineLike(Protocol):
    """The part of :class:`dpsql.engine.Engine` the wire server uses (see ENGINE_CONTRACT)."""

    def prepare(self, sql_text: str, analyst: str | None = None) -> Any: ...
    def describe(
        self, prepared: Any, session: SessionContext, param_types: Sequence[int] = ()
    ) -> tuple[ResultColumn, ...]: ...
    def execute(
        self, prepared: Any, session: SessionContext, params: Sequence[Any] = (), cancel: Any = None
    ) -> Result: ...
    def split(self, sql_text: str) -> list[str]: ...


def new_cancel_token() -> Any:
    try:
        from dpsql.execute.backend import CancelToken
    except ImportError:
        return None
    return CancelToken()


@dataclass(frozen=True)
class Statement:
    """A statement ready to run: a session statement or an engine ``Prepared``, parsed once."""

    sql: str
    session: SessionStatement | None
    prepared: Any
    fingerprint: str
    kind: str = field(init=False)  # "session", or the engine's kind (read on every message)

    def __post_init__(self) -> None:
        kind = "session" if self.session is not None else str(self.prepared.kind)
        object.__setattr__(self, "kind", kind)

    @property
    def param_count(self) -> int:
        return 0 if self.prepared is None else int(getattr(self.prepared, "param_count", 0))


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
