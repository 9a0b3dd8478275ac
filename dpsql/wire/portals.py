"""The prepared statements and portals of a session (the query protocol's own state), and the
checks on them that need no driver: parameter types at Parse, parameter values and result
formats at Bind; a statement's result columns (:func:`statement_columns`: asked of the driver
once, then kept on the statement).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dpsql.errors import ProtocolViolation
from dpsql.result import Result, ResultColumn
from dpsql.wire.cursors import CursorStatement
from dpsql.wire.encode import decode_param
from dpsql.wire.engine_api import Statement
from dpsql.wire.params import infer_param_types, typed_deferred
from dpsql.wire.requests import ROUTE_EMPTY, DescribeColumns, Request, Route
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
    params: tuple[object, ...]
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


def typed_statement(stmt: Statement, oids: tuple[int, ...]) -> Statement:
    """``stmt`` with its Parse's parameter types (``oids``: :func:`param_oids`) where the
    engine binds by them (:func:`dpsql.wire.params.typed_deferred`)."""
    if stmt.prepared is None:
        return stmt
    typed = typed_deferred(stmt.prepared, oids)
    return stmt if typed is stmt.prepared else replace(stmt, prepared=typed)


def check_formats(formats: Sequence[int], ncols: int) -> None:
    if len(formats) not in (0, 1, ncols):
        raise ProtocolViolation(
            f"bind message has {len(formats)} result formats but query has {ncols} columns"
        )


def bind_params(
    prep: PreparedStatement, statement: str, pf: tuple[int, ...], values: tuple[bytes | None, ...]
) -> tuple[object, ...]:
    """A Bind's parameter values decoded by the statement's types (``pf``: their formats), the
    statement's own only.

    Raises:
        DpsqlError: 08P01 for a count that does not match, 22P02/22P03 for a bad value.
    """
    n = len(prep.param_types)
    if len(values) != n:
        raise ProtocolViolation(
            f"bind message supplies {len(values)} parameters, but prepared statement "
            f'"{statement}" requires {n}'
        )
    if len(pf) not in (0, 1, n):
        raise ProtocolViolation(f"bind message has {len(pf)} parameter formats but {n} parameters")
    types = prep.param_types
    params = tuple([
        decode_param(v, types[i], pf[i] if len(pf) > 1 else (pf[0] if pf else 0), i + 1)
        for i, v in enumerate(values)
    ])  # fmt: skip
    # Parse may declare more types than the statement uses: PostgreSQL checks and ignores
    # the extra values, so the engine gets only the statement's own.
    return params[: prep.stmt.param_count]


def statement_columns(
    prep: PreparedStatement, show_intervals: bool
) -> Generator[Request, Any, tuple[ResultColumn, ...]]:
    """Result columns of a statement (cached; described without reading data): a session
    statement's here, an engine statement's asked of the driver (:class:`DescribeColumns`)
    once per ``show_intervals`` setting (the session's ``dpsql.show_intervals``: the interval
    columns it adds)."""
    stmt = prep.stmt
    if stmt.session is not None:
        st = stmt.session
        if st.kind != "show":
            return ()
        if st.name == "all":
            return tuple(ResultColumn(n, TEXT_OID) for n in ("name", "setting", "description"))
        return (ResultColumn(st.name or "", TEXT_OID),)
    if prep.route is ROUTE_EMPTY:
        return ()
    key = bool(show_intervals)
    cols = prep.described.get(key)
    if cols is None:
        # the Parse's own types, not the wire's guesses for 0s: PostgreSQL infers those
        cols = tuple((yield DescribeColumns(stmt, prep.declared)))
        prep.described[key] = cols
    return cols
