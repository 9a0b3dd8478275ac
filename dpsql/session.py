"""Per-session state the engine needs: who is asking and with which privacy settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction


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
