"""Running SQL cursor statements in the query protocol (:mod:`dpsql.wire.cursors` says what
they are): DECLARE runs its query once and keeps its result as a portal named as the cursor;
FETCH and MOVE walk it; CLOSE and the transaction's end drop it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from dpsql.errors import (
    DuplicateCursor,
    InvalidCursorName,
    NoActiveSqlTransaction,
    ObjectNotInPrerequisiteState,
)
from dpsql.result import Result, ResultColumn
from dpsql.wire.cursors import CursorStatement, move
from dpsql.wire.encode import command_complete
from dpsql.wire.engine_api import Statement
from dpsql.wire.portals import Portal, PreparedStatement
from dpsql.wire.requests import Outbox, Run, Steps, route
from dpsql.wire.rows_out import encoders, send_rows
from dpsql.wire.state import Outcome, SessionState


class Session(Protocol):
    """What of :class:`dpsql.wire.protocol.Protocol` the cursor statements use."""

    portals: dict[str, Portal]
    state: SessionState
    out: Outbox
    fast_path: bool

    def _row_description(
        self, cols: tuple[ResultColumn, ...], formats: tuple[int, ...]
    ) -> None: ...

    def _notices(self, res: Result | Outcome) -> None: ...


def cursor_of(p: Session, name: str | None) -> Portal:
    """The open cursor ``name`` (34000 as PostgreSQL when there is none)."""
    portal = p.portals.get(name or "")
    if portal is None or portal.cursor is None:
        raise InvalidCursorName(f'cursor "{name}" does not exist')
    return portal


def columns(p: Session, cur: CursorStatement) -> tuple[ResultColumn, ...]:
    """What a FETCH returns (the cursor's columns); nothing for the other cursor statements."""
    if cur.kind != "fetch":
        return ()
    res = cursor_of(p, cur.name).result
    return tuple(res.columns) if res is not None else ()


def run_cursor(
    p: Session, stmt: Statement, params: Sequence[object], formats: tuple[int, ...] | None
) -> Steps:
    """Run a cursor statement: its messages go out (``formats`` None: the simple protocol, the
    FETCH's RowDescription too, in the cursor's own format)."""
    cur = stmt.cursor
    assert cur is not None
    if cur.kind == "declare":
        yield from _declare(p, stmt, params)
        return
    if cur.kind == "close":
        if cur.name is None:
            for name in [k for k, v in p.portals.items() if v.cursor is not None]:
                del p.portals[name]
        else:
            cursor_of(p, cur.name)
            del p.portals[cur.name]
        p.out.send(command_complete("CLOSE CURSOR"))
        return
    portal = cursor_of(p, cur.name)
    res = portal.result
    assert res is not None and portal.cursor is not None
    rows = res.rows
    if cur.direction == "backward" or (
        cur.direction in ("absolute", "relative") and _behind(portal.pos, len(rows), cur)
    ):
        if not portal.cursor.scroll:
            raise ObjectNotInPrerequisiteState(
                "cursor can only scan forward",
                hint="Declare it with SCROLL option to enable backward scan.",
            )
    picked, portal.pos = move(portal.pos, len(rows), cur.direction, cur.count)
    if cur.kind == "move":
        p.out.send(command_complete(f"MOVE {len(picked)}"))
        return
    cols = tuple(res.columns)
    fmts = portal.formats if formats is None else formats
    if formats is None:
        p._row_description(cols, fmts)
    yield from send_rows(p.out, [rows[i] for i in picked], encoders(cols, fmts, res))
    p.out.send(command_complete(f"FETCH {len(picked)}"))


def _behind(pos: int, n: int, cur: CursorStatement) -> bool:
    """Whether an ABSOLUTE / RELATIVE move goes back from ``pos``."""
    count = cur.count or 0
    if cur.direction == "relative":
        return count < 0
    return (n + 1 + count if count < 0 else count) < pos


def _declare(p: Session, stmt: Statement, params: Sequence[object]) -> Steps:
    cur = stmt.cursor
    assert cur is not None and cur.name is not None
    if not cur.hold and p.state.status != "T":
        raise NoActiveSqlTransaction("DECLARE CURSOR can only be used in transaction blocks")
    if cur.name in p.portals:
        raise DuplicateCursor(f'cursor "{cur.name}" already exists')
    where = route(stmt, p.fast_path)
    res = yield Run(stmt, tuple(params), None, where)  # charged here, once, if private
    p._notices(res)
    p.portals[cur.name] = Portal(
        PreparedStatement(stmt, (), where),
        (),
        (1,) if cur.binary else (),
        result=res,
        cursor=cur,
        in_block=p.state.status == "T",
    )
    p.out.send(command_complete("DECLARE CURSOR"))


def end_of_transaction(portals: dict[str, Portal], committed: bool) -> None:
    """The transaction block ended: its cursors without HOLD close, and on a rollback so do
    those WITH HOLD it declared (PostgreSQL's rules); the others stay, now outside a block."""
    for name, portal in list(portals.items()):
        cur = portal.cursor
        if cur is None:
            continue
        if not cur.hold or (portal.in_block and not committed):
            del portals[name]
        else:
            portal.in_block = False
