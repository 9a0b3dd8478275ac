"""SQL cursors: ``DECLARE ... CURSOR FOR``, ``FETCH``, ``MOVE``, ``CLOSE`` (parsing and moving).

Drivers read large results through them: psycopg's ``conn.cursor(name=...)`` (and so
SQLAlchemy's ``stream_results=True``, and pandas' ``read_sql(..., chunksize=)`` on such a
connection) sends ``DECLARE "c" CURSOR FOR <query>``, describes the portal ``c``, then ``FETCH
FORWARD n FROM "c"`` until it is empty, and ``CLOSE "c"``.

dpsql answers the cursor's query once, at DECLARE, as it answers the query itself (a private
one is charged and released then, once; its notices go out with the DECLARE); its rows are
held in the session (:class:`dpsql.wire.portals.Portal`, named as the cursor: a cursor is a
portal, as in PostgreSQL) and FETCH and MOVE walk them, in either direction (the rows are held:
backward is refused only for a cursor declared NO SCROLL). As in PostgreSQL, a cursor without
HOLD lives until its transaction ends and can only be declared in a transaction block (25P01);
one WITH HOLD outlives COMMIT (not a ROLLBACK of the transaction that declared it).

This module is pure: the statements' grammar (PostgreSQL's, the forms drivers send) and the
position arithmetic. :class:`dpsql.wire.protocol.Protocol` runs them.

>>> parse_cursor_statement('DECLARE "c_1" NO SCROLL CURSOR WITH HOLD FOR SELECT 1')
CursorStatement(kind='declare', name='c_1', query='SELECT 1', hold=True, scroll=False, binary=False, direction='forward', count=1)
>>> parse_cursor_statement('FETCH FORWARD 100 FROM "c_1"')
CursorStatement(kind='fetch', name='c_1', query='', hold=False, scroll=True, binary=False, direction='forward', count=100)
>>> move(0, 5, "forward", 2), move(2, 5, "forward", None), move(6, 5, "backward", 2)
(([0, 1], 2), ([2, 3, 4], 6), ([4, 3], 4))
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from dpsql.errors import SqlSyntaxError

Kind = Literal["declare", "fetch", "move", "close"]
Direction = Literal["forward", "backward", "absolute", "relative"]

_TOKEN = re.compile(
    r"""\s+ | --[^\n]* | /\*.*?\*/ | (?P<qid>"(?:[^"]|"")+") | (?P<num>[-+]?\d+)
    | (?P<word>[A-Za-z_][A-Za-z0-9_$]*) | (?P<semi>;)""",
    re.VERBOSE | re.DOTALL,
)
_FIRST_CHARS = frozenset("dDfFmMcC-/")
_QUERY_START = frozenset({"select", "with", "values", "table", "("})


@dataclass(frozen=True, slots=True)
class CursorStatement:
    """A cursor statement. ``name``: the cursor's (None: ``CLOSE ALL``); ``query``: what
    DECLARE runs; ``count``: rows to fetch or move (None: ALL; for ``absolute`` / ``relative``
    the position)."""

    kind: Kind
    name: str | None
    query: str = ""
    hold: bool = False
    scroll: bool = True
    binary: bool = False
    direction: Direction = "forward"
    count: int | None = 1


class _Words:
    """The statement's tokens up to DECLARE's query (kept as written)."""

    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.pos = 0

    def next(self) -> tuple[str, str] | None:
        """(kind, text) of the next token (words lower-cased, identifiers unquoted)."""
        while self.pos < len(self.sql):
            m = _TOKEN.match(self.sql, self.pos)
            if m is None:
                raise self.error()
            self.pos = m.end()
            if m.group("qid"):
                return "name", m.group("qid")[1:-1].replace('""', '"')
            if m.group("num"):
                return "num", m.group("num")
            if m.group("word"):
                return "word", m.group("word").lower()
            if m.group("semi"):
                return "semi", ";"
        return None

    def peek(self) -> tuple[str, str] | None:
        pos = self.pos
        tok = self.next()
        self.pos = pos
        return tok

    def accept(self, *words: str) -> str | None:
        tok = self.peek()
        if tok is not None and tok[0] == "word" and tok[1] in words:
            self.next()
            return tok[1]
        return None

    def name(self) -> str:
        tok = self.next()
        if tok is None or tok[0] not in ("word", "name"):
            raise self.error()
        return tok[1]

    def end(self) -> None:
        tok = self.next()
        if tok is not None and not (tok[0] == "semi" and self.next() is None):
            raise self.error()

    def error(self) -> SqlSyntaxError:
        near = self.sql[self.pos :].split(None, 1)
        at = f'at or near "{near[0]}"' if near else "at end of input"
        return SqlSyntaxError(f"syntax error {at}")


def parse_cursor_statement(sql: str) -> CursorStatement | None:
    """``sql`` as a cursor statement, or None when it is not one.

    Raises:
        SqlSyntaxError: 42601, a cursor statement PostgreSQL would not read.
    """
    if sql.lstrip()[:1] not in _FIRST_CHARS:  # the usual statement, at once
        return None
    w = _Words(sql)
    try:
        first = w.accept("declare", "fetch", "move", "close")
    except SqlSyntaxError:
        return None
    if first is None:
        return None
    if first == "declare":
        return _declare(w)
    if first == "close":
        if w.accept("all"):
            w.end()
            return CursorStatement("close", None)
        name = w.name()
        w.end()
        return CursorStatement("close", name)
    return _fetch(w, "fetch" if first == "fetch" else "move")


def _declare(w: _Words) -> CursorStatement:
    name = w.name()
    binary, scroll = False, True
    while True:
        opt = w.accept("binary", "insensitive", "asensitive", "no", "scroll")
        if opt is None:
            break
        if opt == "binary":
            binary = True
        elif opt == "no":
            if not w.accept("scroll"):
                raise w.error()
            scroll = False
        elif opt == "scroll":
            scroll = True
    if not w.accept("cursor"):
        raise w.error()
    hold = False
    how = w.accept("with", "without")
    if how is not None:
        if not w.accept("hold"):
            raise w.error()
        hold = how == "with"
    if not w.accept("for"):
        raise w.error()
    query = w.sql[w.pos :].strip().rstrip(";").strip()
    start = query[:1] if query[:1] == "(" else query.split(None, 1)[0].lower() if query else ""
    if start not in _QUERY_START:
        raise w.error()
    return CursorStatement("declare", name, query, hold, scroll, binary)


def _fetch(w: _Words, kind: Kind) -> CursorStatement:
    direction: Direction = "forward"
    count: int | None = 1
    word = w.accept(
        "next", "prior", "first", "last", "absolute", "relative", "all", "forward", "backward"
    )
    if word in ("absolute", "relative"):
        direction, count = word, _number(w)  # type: ignore[assignment]
    elif word == "first":
        direction, count = "absolute", 1
    elif word == "last":
        direction, count = "absolute", -1
    elif word == "prior":
        direction = "backward"
    elif word == "all":
        count = None
    elif word in ("forward", "backward"):
        direction = word  # type: ignore[assignment]
        if w.accept("all"):
            count = None
        elif (w.peek() or ("", ""))[0] == "num":
            count = _number(w)
    elif word is None and (w.peek() or ("", ""))[0] == "num":
        count = _number(w)
    if count is not None and count < 0 and direction in ("forward", "backward"):
        direction = "backward" if direction == "forward" else "forward"
        count = -count
    if direction == "forward" and count == 0:
        direction = "relative"  # FETCH 0, FORWARD 0: the current row again
    if direction == "backward" and count == 0:
        direction = "relative"
    w.accept("from", "in")
    name = w.name()
    w.end()
    return CursorStatement(kind, name, direction=direction, count=count)


def _number(w: _Words) -> int:
    tok = w.next()
    if tok is None or tok[0] != "num":
        raise w.error()
    return int(tok[1])


def move(pos: int, n: int, direction: Direction, count: int | None) -> tuple[list[int], int]:
    """The rows a FETCH returns (0-based indices, in the order sent) and the cursor's new
    position, PostgreSQL's: 0 before the first row, k on row k (1-based), ``n + 1`` after the
    last. ``count`` None: all the rows in ``direction``."""
    if direction == "forward":
        last = n if count is None else min(n, pos + count)
        rows = list(range(pos, last)) if pos < n else []
        return rows, n + 1 if count is None or pos + count > n else pos + count
    if direction == "backward":
        first = 1 if count is None else max(1, pos - count)
        top = min(pos - 1, n)
        rows = [i - 1 for i in range(top, first - 1, -1)] if top >= 1 else []
        return rows, 0 if count is None or pos - count < 1 else pos - count
    target = (count or 0) + (pos if direction == "relative" else 0)
    if direction == "absolute" and (count or 0) < 0:
        target = n + 1 + (count or 0)
    if target < 1:
        return [], 0
    if target > n:
        return [], n + 1
    return [target - 1], target
