"""The prepared statements and portals of a session (the query protocol's own state), and the
checks on them that need no driver: parameter types at Parse, result formats at Bind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dpsql.errors import ProtocolViolation
from dpsql.result import Result, ResultColumn
from dpsql.wire.cursors import CursorStatement
from dpsql.wire.engine_api import Statement
from dpsql.wire.params import infer_param_types
from dpsql.wire.requests import Route
from dpsql.wire.state import TEXT_OID, Outcome


@dataclass
class PreparedStatement:
    """A named (or unnamed) prepared statement of this session."""

    stmt: Statement
    param_types: tuple[int, ...]
    route: Route  # where it runs, decided once at Parse
    described: dict[bool, tuple[ResultColumn, ...]] = field(default_factory=dict)
    declared: tuple[int, ...] = ()  # the Parse's own types (0: unspecified), for the engine


@dataclass(slots=True)
class Portal:
    prepared: PreparedStatement
    params: tuple[Any, ...]
    formats: tuple[int, ...]
    result: Result | Outcome | None = None
    pos: int = 0  # the next row's index; a cursor's: PostgreSQL's position (dpsql.wire.cursors)
    cursor: CursorStatement | None = None  # a SQL cursor's DECLARE (the portal is the cursor)
    in_block: bool = False  # a cursor declared in the transaction block now open


def param_oids(stmt: Statement, declared: tuple[int, ...]) -> tuple[int, ...]:
    """Parameter types: as declared in Parse, else as :mod:`dpsql.wire.params` infers them from
    the prepared statement, else text."""
    inferred: Sequence[int] = ()
    if stmt.prepared is not None and 0 in declared:
        inferred = infer_param_types(stmt.prepared)
    out = []
    for i, t in enumerate(declared):
        if t == 0 and i < len(inferred) and inferred[i]:
            t = int(inferred[i])
        out.append(t or TEXT_OID)
    return tuple(out)


def check_formats(formats: Sequence[int], ncols: int) -> None:
    if len(formats) not in (0, 1, ncols):
        raise ProtocolViolation(
            f"bind message has {len(formats)} result formats but query has {ncols} columns"
        )
