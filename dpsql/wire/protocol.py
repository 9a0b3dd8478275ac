"""The query protocols of one session as a sans-IO state machine: no sockets, no asyncio.

:class:`Protocol` consumes decoded frontend messages (simple query, and the extended protocol's
Parse / Bind / Describe / Execute / Close / Sync / Flush) and writes the backend messages it
answers to an :class:`~dpsql.wire.requests.Outbox`. What it cannot do itself it asks its driver
for by *yielding* a request of :mod:`dpsql.wire.requests` (psycopg 3's ``generators.py`` habit):
``Split``, ``Prepare``, ``DescribeColumns``, ``Run`` and ``Flush``. The driver
(:class:`dpsql.wire.session.Session`) performs the request and sends the reply back into the
generator, or throws the request's exception into it::

    gen = protocol.handle(msg)
    req = next(gen)                 # StopIteration: the message is handled
    reply = await perform(req)      # or gen.throw(error)
    req = gen.send(reply)

So the whole protocol is testable with plain message sequences (``tests/unit/wire/test_wire_protocol.py``).

One Bind/Execute path serves every client: a portal runs once, on its first Execute (or on a
Describe directly followed by its Execute: the Describe's answer waits for the next message, and
when that is the portal's Execute the rows bring their columns, with no separate describe); its
rows go out ``max_rows`` at a time with PortalSuspended in between, so a DP release is charged
exactly once per portal. Where a statement runs is decided once, by
:func:`~dpsql.wire.requests.route`: the session's own statements, the engine (private releases
padded), or the upstream directly for public and catalog statements (the fast path). After an error every extended-protocol message is
discarded until Sync, which answers ReadyForQuery. A Bind's values are decoded by
:func:`~dpsql.wire.portals.bind_params`; rows go out through :mod:`dpsql.wire.rows_out`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dpsql.errors import (
    DpsqlError,
    DuplicateCursor,
    DuplicatePreparedStatement,
    InvalidCursorName,
    InvalidSqlStatementName,
    UnsupportedSql,
)
from dpsql.result import Result, ResultColumn
from dpsql.sql.bind import check_param_types
from dpsql.wire import messages as m
from dpsql.wire.batch import DESCRIBE, BindParts
from dpsql.wire.cursor_run import columns as cursor_columns
from dpsql.wire.cursor_run import end_of_transaction, run_cursor
from dpsql.wire.encode import command_complete, row_description
from dpsql.wire.engine_api import Statement, as_dpsql_error
from dpsql.wire.portals import (
    Portal,
    PreparedStatement,
    bind_params,
    check_formats,
    param_oids,
    statement_columns,
    typed_statement,
)
from dpsql.wire.requests import (
    ROUTE_EMPTY,
    Flush,
    Malformed,
    Outbox,
    Prepare,
    Run,
    Split,
    Steps,
    route,
)
from dpsql.wire.rows_out import copy_out, encoders, send_rows, shape
from dpsql.wire.setting_values import notice_wanted
from dpsql.wire.state import Outcome, SessionState
from dpsql.wire.statements import SessionKind, SessionStatement

_BATCH_CODES = frozenset(b"PBDECH")  # extended-protocol messages discarded after an error
_PARSE_COMPLETE = m.ParseComplete().encode()
_BIND_COMPLETE = m.BindComplete().encode()
_NO_DATA = m.NoData().encode()
_CLOSE_COMPLETE = m.CloseComplete().encode()
_EMPTY_QUERY = m.EmptyQueryResponse().encode()
_SUSPENDED = m.PortalSuspended().encode()
_READY = {s: m.ReadyForQuery(s).encode() for s in "ITE"}
_FLUSH = Flush()
_READY_FLUSH = Flush(ready=True)
_TXN_KINDS: frozenset[SessionKind] = frozenset(
    {"begin", "commit", "rollback", "rollback_to", "savepoint", "release"}
)


def _undefined(kind: str, name: str, cls: type[DpsqlError]) -> DpsqlError:
    return cls(f'{kind} "{name}" does not exist', hint=f"Parse/Bind the {kind} first")  # fmt: skip


class Protocol:
    """The query protocols of one session.

    Args:
        out: where backend messages go.
        state: the session's settings and transaction status (pure, see :mod:`dpsql.wire.state`).
        fast_path: public and catalog statements may run on the upstream directly.
    """

    def __init__(self, out: Outbox, state: SessionState, *, fast_path: bool = False) -> None:
        self.out = out
        self.state = state
        self.fast_path = fast_path
        self.statements: dict[str, PreparedStatement] = {}
        self.portals: dict[str, Portal] = {}
        self.skipping = False  # an extended-protocol error: discard until Sync
        self.ended = False  # a fatal protocol error: the session must end
        self._describing: tuple[m.Describe, Portal] | None = None  # answered at the next message

    # ---- entry points ----------------------------------------------------------------------
    def discards(self, code: bytes) -> bool:
        """Whether a message of type ``code`` would be discarded unread (after an error, until
        Sync): the driver need not even decode it."""
        return self.skipping and code[0] in _BATCH_CODES and code != b"H"

    def handle(self, msg: m.FrontendMessage | Malformed) -> Steps:
        """Handle one message (a generator of requests, see the module's docstring)."""
        if self._describing is not None:
            yield from self._settle_describe(msg)
        cls = type(msg)
        if cls in _EXTENDED:
            if self.skipping:
                return
            try:
                if cls is m.Execute:  # the usual one first
                    yield from self._execute(msg)  # type: ignore[arg-type]
                elif cls is m.Bind:
                    b: m.Bind = msg  # type: ignore[assignment]
                    self._bind(b.portal, b.statement, b.param_formats, b.params, b.result_formats)
                elif cls is m.Close:
                    self._close(msg)  # type: ignore[arg-type]
                elif cls is m.Describe and msg.kind == "P":  # type: ignore[union-attr]
                    self._describe_portal(msg)  # type: ignore[arg-type]
                else:
                    yield from _EXTENDED[cls](self, msg)  # type: ignore[misc]
            except Exception as e:
                self.send_error(e)
                self.failed()
                yield _FLUSH  # as PostgreSQL, an error goes out at once
        elif cls is m.Sync:
            self._sync()
            yield _READY_FLUSH
        elif cls is m.Query:
            yield from self._query(msg.sql)  # type: ignore[union-attr]
        elif cls is m.Flush:
            yield _FLUSH
        elif cls is Malformed:
            yield from self._malformed(msg)  # type: ignore[arg-type]
        elif cls is m.FunctionCall:
            self.send_error(UnsupportedSql("fast-path function calls are not supported",
                                           hint="call the function in a SELECT"))  # fmt: skip
            yield from self._ready()
        # anything else (COPY messages outside COPY mode, as PostgreSQL) is ignored

    def handle_batch(self, bind: BindParts, tail: Sequence[m.FrontendMessage]) -> Steps:
        """A Bind (its fields, as :func:`dpsql.wire.batch.decode_bind` gives them) and the
        messages right behind it, handled exactly as one by one (the usual run of a prepared
        statement, without building the Bind)."""
        if self._describing is not None:
            yield from self._settle_describe(None)
        if not self.skipping:
            try:
                self._bind(*bind)
            except Exception as e:
                self.send_error(e)
                self.failed()
                yield _FLUSH
        if not self.skipping and tail[0] is DESCRIBE:
            self._describe_portal(DESCRIBE)  # handle(DESCRIBE) of the portal just bound
            tail = tail[1:]
        for msg in tail:  # handle(msg), the usual Execute and Sync written out (a generator less)
            cls = msg.__class__
            if cls is m.Execute:
                if self._describing is not None:
                    yield from self._settle_describe(msg)
                if self.skipping:
                    continue
                try:
                    yield from self._execute(msg)  # type: ignore[arg-type]
                except Exception as e:
                    self.send_error(e)
                    self.failed()
                    yield _FLUSH
            elif cls is m.Sync and self._describing is None:
                self._sync()
                yield _READY_FLUSH
            else:
                yield from self.handle(msg)

    def apply_session(self, st: SessionStatement) -> Outcome:
        """Run a session statement (the driver's answer to a :class:`Run` of
        :attr:`Route.SESSION`): the state changes, its notices and ParameterStatus go out.

        Raises:
            DpsqlError: as :meth:`SessionState.apply`; 26000 for DEALLOCATE of an unknown name.
        """
        before = self.state.status
        out = self.state.apply(st)
        if before != "I" and self.state.status == "I":
            end_of_transaction(self.portals, committed=before == "T" and st.kind == "commit")
        for severity, code, msg in out.notices:
            self.send_notice(severity, code, msg)
        for name, value in out.parameter_status:
            self.out.send(m.ParameterStatus(name, value).encode())
        if out.discard_all:
            self.statements.clear()
            self.portals.clear()
        if out.is_deallocate:
            self._deallocate(out.deallocate or None)
        return out

    @property
    def _held(self) -> dict[str, Portal]:
        """The cursors WITH HOLD open outside a transaction block (they outlive Sync)."""
        return {k: v for k, v in self.portals.items() if v.cursor is not None and v.cursor.hold}

    # ---- small pieces ----------------------------------------------------------------------
    def send_error(self, err: BaseException) -> DpsqlError:
        e = as_dpsql_error(err)
        self.out.send(m.ErrorResponse(e.fields()).encode())
        return e

    def send_notice(self, severity: str, code: str, message: str) -> None:
        """A NoticeResponse, unless the session's ``client_min_messages`` is above its severity
        (PostgreSQL's rule: ``SET client_min_messages = warning`` quiets NOTICEs, dpsql's
        accuracy notices included, and still sends WARNINGs; INFO is always sent)."""
        if not notice_wanted(severity, self.state.settings.get("client_min_messages", "notice")):
            return
        fields = {"S": severity, "V": severity, "C": code, "M": message}
        self.out.send(m.NoticeResponse(fields).encode())

    def failed(self) -> None:
        self.skipping = True
        self.state.fail()

    def _sync(self) -> None:
        """A Sync: the end of an extended-protocol error, the transaction's portals, and
        ReadyForQuery (flushed by the caller's ``_READY_FLUSH``)."""
        self.skipping = False
        if self.state.status == "I":
            held = self._held if self.portals else None  # cursors WITH HOLD stay
            self.portals.clear()  # portals live until their transaction ends
            if held:
                self.portals.update(held)
        else:
            self.portals.pop("", None)
        self.out.send(_READY[self.state.status])

    def _ready(self) -> Steps:
        self.out.send(_READY[self.state.status])
        yield _READY_FLUSH

    def _deallocate(self, name: str | None) -> None:
        if name is None:
            self.statements.clear()
        elif self.statements.pop(name, None) is None:
            raise _undefined("prepared statement", name, InvalidSqlStatementName)

    def _check_txn(self, stmt: Statement) -> None:
        if self.state.status == "E" and (
            stmt.session is None or stmt.session.kind not in _TXN_KINDS
        ):  # the status first: check_not_failed's own test, without its call
            self.state.check_not_failed()

    # ---- simple query ----------------------------------------------------------------------
    def _query(self, sql: str) -> Steps:
        self.statements.pop("", None)  # a simple Query closes the unnamed statement and portal
        self.portals.pop("", None)
        try:
            texts: list[str] = yield Split(sql)
        except Exception as e:
            self.send_error(e)
            self.state.fail()
            yield from self._ready()
            return
        if not texts:
            self.out.send(_EMPTY_QUERY)
        for text in texts:
            try:
                stmt: Statement = yield Prepare(text)
                if stmt.cursor is not None:  # DECLARE / FETCH / MOVE / CLOSE
                    self._check_txn(stmt)
                    yield from run_cursor(self, stmt, (), None)
                    continue
                where = route(stmt, self.fast_path)
                res = yield Run(stmt, (), (), where)
                if where is ROUTE_EMPTY:
                    self.out.send(_EMPTY_QUERY)
                    continue
                self._notices(res)
                if stmt.copy is not None:  # COPY ... TO STDOUT: the rows as COPY writes them
                    yield from copy_out(self.out, stmt.copy, res)
                    continue
                columns, rows, tag = shape(res)
                if columns:
                    self.out.send(row_description(tuple(columns), ()))
                    yield from send_rows(self.out, rows, encoders(columns, (), res))
                self.out.send(command_complete(tag))
            except Exception as e:
                self.send_error(e)
                self.state.fail()
                break
        yield from self._ready()

    # ---- the extended protocol -------------------------------------------------------------
    def _malformed(self, msg: Malformed) -> Steps:
        if msg.code not in m.frontend._BY_CODE:  # not a message at all: the stream is lost
            msg.error.severity = "FATAL"
            self.send_error(msg.error)
            self.ended = True
            yield _FLUSH
            return
        self.send_error(msg.error)
        if msg.code[0] in _BATCH_CODES:
            self.failed()
            return
        yield from self._ready()

    def _parse(self, msg: m.Parse) -> Steps:
        if msg.statement and msg.statement in self.statements:
            raise DuplicatePreparedStatement(
                f'prepared statement "{msg.statement}" already exists',
                hint="Close it first or use another name",
            )  # fmt: skip
        stmt: Statement = yield Prepare(msg.sql)
        self._check_txn(stmt)
        where = route(stmt, self.fast_path)
        if where is not ROUTE_EMPTY:  # PostgreSQL types the parameters at Parse
            tree = stmt.prepared.tree if stmt.prepared is not None else None
            check_param_types(tree, stmt.param_count, msg.param_types)
        n = max(stmt.param_count, len(msg.param_types))
        declared = tuple(msg.param_types) + (0,) * (n - len(msg.param_types))
        oids = param_oids(stmt, declared)
        stmt = typed_statement(stmt, oids)  # SUM(quantity / $1): bound as $1's type
        self.statements[msg.statement] = PreparedStatement(stmt, oids, where, declared=declared)
        self.out.send(_PARSE_COMPLETE)

    def _bind(
        self,
        portal: str,
        statement: str,
        pf: tuple[int, ...],
        values: tuple[bytes | None, ...],
        result_formats: tuple[int, ...],
    ) -> None:
        prep = self.statements.get(statement)
        if prep is None:
            raise _undefined("prepared statement", statement, InvalidSqlStatementName)
        self._check_txn(prep.stmt)
        if portal and portal in self.portals:
            raise DuplicateCursor(f'portal "{portal}" already exists',
                                  hint="Close it first or use another name")  # fmt: skip
        self.portals[portal] = Portal(
            prep, bind_params(prep, statement, pf, values), result_formats
        )
        self.out.send(_BIND_COMPLETE)

    def _describe(self, msg: m.Describe) -> Steps:
        """Describe a statement (a portal: :meth:`_describe_portal`)."""
        prep = self.statements.get(msg.name)
        if prep is None:
            raise _undefined("prepared statement", msg.name, InvalidSqlStatementName)
        if prep.stmt.cursor is not None:
            self.out.send(m.ParameterDescription(prep.param_types).encode())
            self._row_description(cursor_columns(self, prep.stmt.cursor), ())
            return
        if prep.stmt.copy is not None:  # COPY returns no rows (its data goes as CopyData)
            self.out.send(m.ParameterDescription(prep.param_types).encode())
            self.out.send(_NO_DATA)
            return
        cols = yield from statement_columns(prep, self.state.ctx.show_intervals)
        self.out.send(m.ParameterDescription(prep.param_types).encode())
        self._row_description(cols, ())

    def _describe_portal(self, msg: m.Describe) -> None:
        portal = self.portals.get(msg.name)
        if portal is None:
            raise _undefined("portal", msg.name, InvalidCursorName)
        cur = portal.prepared.stmt.cursor
        if cur is not None and portal.cursor is None:  # a FETCH's portal: the cursor's columns
            self._row_description(cursor_columns(self, cur), portal.formats)
            return
        if portal.prepared.stmt.copy is not None:
            self.out.send(_NO_DATA)
            return
        if portal.result is None:
            self._describing = (msg, portal)  # answered when the next message is known
            return
        self._row_description(tuple(portal.result.columns), portal.formats)

    def _settle_describe(self, nxt: m.FrontendMessage | Malformed | None) -> Steps:
        """Answer the Describe of a portal that has not run. When ``nxt`` executes that portal,
        run it now: its columns come with the rows and it runs exactly once either way; else
        describe it without running it."""
        assert self._describing is not None
        msg, portal = self._describing
        self._describing = None
        try:
            if isinstance(nxt, m.Execute) and nxt.portal == msg.name:
                portal.result = res = yield self._portal_run(portal)
                self._notices(res)
                cols = tuple(res.columns)
            else:
                cols = yield from statement_columns(portal.prepared, self.state.ctx.show_intervals)
            self._row_description(cols, portal.formats)
        except Exception as e:
            self.send_error(e)
            self.failed()
            yield _FLUSH

    def _row_description(self, cols: tuple[ResultColumn, ...], formats: tuple[int, ...]) -> None:
        if cols:
            check_formats(formats, len(cols))
            self.out.send(row_description(cols, formats))
        else:
            self.out.send(_NO_DATA)

    def _portal_run(self, portal: Portal) -> Run:
        """The request that runs ``portal`` (its result then goes to ``portal.result``)."""
        prep = portal.prepared
        self._check_txn(prep.stmt)
        return Run(prep.stmt, portal.params, portal.formats, prep.route)

    def _execute(self, msg: m.Execute) -> Steps:
        portal = self.portals.get(msg.portal)
        if portal is None:
            raise _undefined("portal", msg.portal, InvalidCursorName)
        if portal.prepared.stmt.cursor is not None and portal.cursor is None:
            self._check_txn(portal.prepared.stmt)
            yield from run_cursor(self, portal.prepared.stmt, portal.params, portal.formats)
            return
        if portal.result is None:
            portal.result = yield self._portal_run(portal)
            self._notices(portal.result)
        copy = portal.prepared.stmt.copy
        if copy is not None:
            yield from copy_out(self.out, copy, portal.result)
            return
        if portal.prepared.route is ROUTE_EMPTY:
            self.out.send(_EMPTY_QUERY)
            return
        res = portal.result
        assert res is not None
        columns, rows, tag = shape(res)
        if not columns:
            self.out.send(command_complete(tag))
            return
        check_formats(portal.formats, len(columns))
        start = portal.pos
        end = len(rows) if msg.max_rows <= 0 else min(len(rows), start + msg.max_rows)
        yield from send_rows(self.out, rows[start:end], encoders(columns, portal.formats, res))
        portal.pos = end
        if end < len(rows):
            self.out.send(_SUSPENDED)
            return
        if start > 0:
            tag = f"{tag.split(' ')[0]} {end - start}"
        self.out.send(command_complete(tag))

    def _close(self, msg: m.Close) -> None:
        if msg.kind == "S":
            prep = self.statements.pop(msg.name, None)
            if prep is not None:
                for name in [k for k, p in self.portals.items() if p.prepared is prep]:
                    del self.portals[name]
        else:
            self.portals.pop(msg.name, None)
        self.out.send(_CLOSE_COMPLETE)

    # ---- results ---------------------------------------------------------------------------
    def _notices(self, res: Result | Outcome) -> None:
        if isinstance(res, Result):
            for notice in res.notices:
                self.send_notice("NOTICE", "00000", notice)


# The extended protocol's messages, discarded after an error until Sync: those that may ask the
# driver for something, and Bind and Close (None: handled in place, they ask for nothing).
_EXTENDED: dict[type, Callable[[Protocol, Any], Steps] | None] = {
    m.Bind: None,
    m.Close: None,
    m.Execute: Protocol._execute,
    m.Describe: Protocol._describe,
    m.Parse: Protocol._parse,
}
