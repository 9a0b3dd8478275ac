"""What a statement's text is, before it runs: a session statement (SET, SHOW, BEGIN ...) or a
cursor statement (FETCH, MOVE, CLOSE) the session answers itself, or a query the engine prepares
(alone, in a ``DECLARE ... CURSOR FOR``, or in a ``COPY (...) TO STDOUT``). The session
(:mod:`dpsql.wire.session`) runs these steps, the engine's parts in a worker thread; a large text
all of them in the parse pool (:meth:`~dpsql.wire.session.Session.prepare`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dpsql.budget.route import is_show_budget
from dpsql.errors import PrivacyViolation, UnsupportedSql
from dpsql.execute.prepared import Prepared, Query, SessionCommand
from dpsql.policy.model import Policy
from dpsql.wire.copy_out import CopyStatement, parse_copy, private_table_refusal
from dpsql.wire.cursors import CursorStatement, parse_cursor_statement
from dpsql.wire.engine_api import EngineAPI, Statement
from dpsql.wire.log import fingerprint
from dpsql.wire.statements import parse_session_statement


@dataclass(frozen=True, slots=True)
class ForEngine:
    """A text the engine must prepare: its query, alone or in the DECLARE or COPY around it."""

    text: str
    cursor: CursorStatement | None  # a DECLARE's (its own query is the cursor's)
    copy: CopyStatement | None  # a COPY (query) TO STDOUT's

    @property
    def query(self) -> str:
        return self.cursor.query if self.cursor is not None else self.text


def read_statement(text: str) -> Statement | ForEngine:
    """A statement the session answers itself, else what the engine must prepare."""
    st = parse_session_statement(text)
    if st is not None and not is_show_budget(text):  # SHOW dpsql.budget: the engine's
        return Statement(text, st, None, fingerprint(text))
    cur = parse_cursor_statement(text)
    if cur is not None and cur.kind != "declare":
        return Statement(text, None, None, fingerprint(text), cur)
    copy = parse_copy(text) if cur is None else None
    return ForEngine(text, cur, copy)


def prepare_for_engine(
    engine: EngineAPI, analyst: str | None, todo: ForEngine, policy: Policy | None
) -> Statement:
    """``todo`` prepared by the engine (blocking: a worker's or the parse pool's thread).
    ``policy``: where a COPY of a private table finds a column to suggest grouping by."""
    if todo.copy is not None:
        return copy_statement(engine, analyst, todo.text, todo.copy, policy)
    return engine_statement(todo.text, engine.prepare(todo.query, analyst), todo.cursor)


def _key_column(policy: Policy | None, table: str) -> str | None:
    """A column of private ``table`` (as written) with declared keys, for a hint."""
    if policy is None:
        return None
    name = table.replace('"', "").lower()
    for full, t in policy.tables.items():
        if name in (full.lower(), full.split(".", 1)[-1].lower()):
            for col, c in t.columns.items():
                if (c.keys is not None or c.keys_from is not None) and not c.identifier:
                    return col
    return None


def copy_statement(
    engine: EngineAPI, analyst: str | None, text: str, copy: CopyStatement, policy: Policy | None
) -> Statement:
    """``COPY ... TO STDOUT`` prepared as its query (refused as that query would be; a
    private table's rows in COPY's own words)."""
    try:
        prepared = engine.prepare(copy.query, analyst)
    except PrivacyViolation as e:
        if copy.table is None:
            raise
        raise private_table_refusal(copy, e, _key_column(policy, copy.table)) from None
    stmt = engine_statement(text, prepared)
    if not isinstance(prepared, Query):  # what a query answers, nothing else
        raise UnsupportedSql("COPY takes a query: COPY (SELECT ...) TO STDOUT",
                             hint="COPY (SELECT ...) TO STDOUT WITH (FORMAT csv, HEADER)")  # fmt: skip
    return replace(stmt, copy=copy)


def engine_statement(
    text: str, prepared: Prepared, cursor: CursorStatement | None = None
) -> Statement:
    """The session's statement for the engine's ``prepared`` (refused: a DECLARE of what is not
    a query, a session command dpsql does not answer)."""
    if cursor is not None and not isinstance(prepared, Query):
        raise UnsupportedSql(
            "DECLARE CURSOR is supported for queries dpsql answers (SELECT, VALUES)",
            hint="declare the cursor for a SELECT",
        )
    if isinstance(prepared, SessionCommand):
        raise UnsupportedSql(
            "this session statement is not supported by dpsql",
            hint="dpsql handles SET, SHOW, RESET, BEGIN/COMMIT/ROLLBACK, SAVEPOINT, "
            "DISCARD, DEALLOCATE",
        )
    return Statement(text, None, prepared, fingerprint(text), cursor)
