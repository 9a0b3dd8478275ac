"""What ``dpsql check`` reports: a finding on a table or column, and how it writes a bound."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    table: str
    column: str
    problem: str
    warning: bool = False  # a deployment advice (yellow, exit status 0), not a mismatch


def bound_text(v: object) -> str:
    """A declared bound as written: a number in %g, a date or timestamp in ISO form."""
    return f"{v:g}" if isinstance(v, (int, float)) else str(v)
