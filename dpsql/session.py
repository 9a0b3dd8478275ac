"""Per-session state the engine needs: who is asking and with which privacy settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol


@dataclass(frozen=True)
class Activity:
    """One of an analyst's own wire sessions, as its ``pg_stat_activity`` row shows it."""

    pid: int  # its process id (BackendKeyData, pg_backend_pid())
    database: str
    application_name: str | None  # None: unknown (another worker process's session)
    state: str | None  # 'active' (a statement runs), 'idle'; None: unknown (another worker's)
    backend_start: str  # ISO 8601, UTC


class SessionDirectory(Protocol):
    """The wire server's sessions as one analyst may see and signal them: only the analyst's
    own, never another analyst's (``pg_stat_activity``, ``pg_cancel_backend``,
    ``pg_terminate_backend``: :mod:`dpsql.catalog.session_functions`)."""

    def activity(self, analyst: str) -> tuple[Activity, ...]:
        """The analyst's sessions in this process."""
        ...

    def signal(self, analyst: str, pid: int, terminate: bool) -> bool:
        """Cancel the running statement of the analyst's session ``pid`` (``terminate``: and end
        the session, as PostgreSQL's pg_terminate_backend does); False when ``pid`` is not one
        of the analyst's sessions."""
        ...


@dataclass
class SessionContext:
    """Mutable settings of one analyst session (the wire session owns one per connection).

    ``epsilon`` / ``delta`` are the per-query values set with ``SET dpsql.epsilon = ...``;
    None means the analyst's (or the policy's) default.
    """

    analyst: str = "default"
    epsilon: Fraction | None = None
    delta: Fraction | None = None
    mechanism: str = "auto"  # auto | laplace | gaussian
    confidence: float | None = None
    show_intervals: bool = False
    settings: dict[str, str] = field(default_factory=dict)
    database: str = ""  # the database the client named at startup ("" outside a wire session)
    backend_pid: int = 0  # the wire session's process id (BackendKeyData), 0 outside one
    # the server's sessions, as this analyst may see and signal them (None outside a server)
    directory: SessionDirectory | None = field(default=None, repr=False, compare=False)
