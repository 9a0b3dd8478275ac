"""One client session after authentication: the message loop, the simple query protocol, and
running statements (session statements here, public and catalog ones on the event loop through
:mod:`dpsql.wire.fastpath`, everything else through the engine in a worker thread).

The extended protocol lives in :mod:`dpsql.wire.extended`; both share :meth:`Session.run_statement`.
Every error becomes an ErrorResponse (from ``DpsqlError.fields()``), then the right ReadyForQuery.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from dpsql.budget.route import is_show_budget
from dpsql.errors import DpsqlError, UnsupportedSql
from dpsql.execute.timing import padded, timing_of
from dpsql.result import Result, ResultColumn
from dpsql.session import SessionContext
from dpsql.sql.prescan import prescan, too_complex
from dpsql.wire import encode
from dpsql.wire import messages as m
from dpsql.wire.conn import Channel, ConnectionClosed
from dpsql.wire.encode import row_encoders
from dpsql.wire.engine_api import EngineLike, Statement, as_dpsql_error
from dpsql.wire.engine_api import new_cancel_token as _new_cancel_token  # tests replace it here
from dpsql.wire.fastpath import FAST_KINDS, raw_encoders, run_fast
from dpsql.wire.log import fingerprint, log_statement, statement_text
from dpsql.wire.messages.backend import data_row, raw_data_row
from dpsql.wire.parsing import parse_pool
from dpsql.wire.state import REPORTED, Outcome, SessionState
from dpsql.wire.statements import parse_session_statement
from dpsql.wire.upstream import AsyncCancel, AsyncUpstream, raw_format_of

if TYPE_CHECKING:
    from dpsql.wire.extended import Extended

log = logging.getLogger("dpsql.wire.session")
_READY = {s: m.ReadyForQuery(s).encode() for s in "ITE"}


class Session:
    """The post-authentication life of one connection."""

    def __init__(
        self,
        ch: Channel,
        engine: EngineLike,
        executor: Executor | None,
        ctx: SessionContext,
        state: SessionState,
        process_id: int,
        secret_key: int,
        upstream: AsyncUpstream | None = None,
    ) -> None:
        from dpsql.wire.extended import Extended

        self.ch = ch
        self.engine = engine
        self.executor = executor
        self.ctx = ctx
        self.state = state
        self.process_id = process_id
        self.secret_key = secret_key
        self.extended: Extended = Extended(self)
        self.upstream = upstream if hasattr(engine, "runnable_sql") else None
        self._cancel: Any = None
        self._retry: asyncio.Task[None] | None = None
        self.busy = False
        self.idle = asyncio.Event()
        self.idle.set()
        self._delivering: asyncio.Task[Any] | None = None  # waiting out a padded answer's moment
        self.closing = False  # the server is shutting down: run (and charge) nothing new
        self._large = False  # a large statement was parsed since the last ReadyForQuery
        ch.on_eof = self._client_gone

    # ---- helpers ---------------------------------------------------------------------------
    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking engine call in the server's thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    def send(self, msg: Any) -> None:
        self.ch.send(msg.encode())

    def send_error(self, err: BaseException) -> DpsqlError:
        e = as_dpsql_error(err)
        self.send(m.ErrorResponse(e.fields()))
        return e

    def send_notice(self, severity: str, code: str, message: str) -> None:
        self.send(m.NoticeResponse({"S": severity, "V": severity, "C": code, "M": message}))

    async def ready(self) -> None:
        if self._large:  # give a large statement's memory back before the next one
            self._large = False
            await parse_pool().release_memory()
        self.ch.send(_READY[self.state.status])
        await self.ch.flush()

    async def _run_engine(
        self, stmt: Statement, params: Sequence[Any], formats: Sequence[int] | None = None
    ) -> Result:
        """engine.execute in a worker thread (public and catalog statements: on the event loop),
        cancellable; cancelled if the client disconnects while it runs (:meth:`_client_gone`)."""
        fast = self.upstream is not None and stmt.kind in FAST_KINDS
        self._cancel = AsyncCancel() if fast else _new_cancel_token()
        self.busy = True
        self.idle.clear()
        if self.ch.eof:  # the client went away before its statement started
            self._client_gone()
        try:
            if fast:
                assert self.upstream is not None
                return await run_fast(self, stmt, params, self.upstream, formats, self._cancel)
            res: Result = await self.call(
                self.engine.execute, stmt.prepared, self.ctx, tuple(params), cancel=self._cancel
            )
            return res
        finally:
            self._cancel = None
            if self._delivering is None:
                self.busy = False
                self.idle.set()

    @contextlib.contextmanager
    def _busy_until_delivered(self) -> Iterator[None]:
        """Busy (shutdown waits, within its grace) until a padded answer is out of the wait: it was
        charged and stored, so it must reach the client."""
        self._delivering, self.busy = asyncio.current_task(), True
        self.idle.clear()
        try:
            yield
        finally:
            self._delivering, self.busy = None, False
            self.idle.set()

    def abandon_delivery(self) -> None:
        """Shutdown past its grace: stop waiting to deliver a padded answer (the session ends).
        Not for CancelRequests: a wait that a cancel could cut short would show when the work
        ended."""
        if self._delivering is not None and self._cancel is None:
            self._delivering.cancel()

    def _client_gone(self) -> None:
        """The client's connection ended (EOF or reset, seen by the channel as it happens, also
        while a statement runs): cancel the running statement, if any."""
        if self._cancel is not None:
            log.info("client went away mid-query; cancelling pid=%d", self.process_id)
            self.cancel()

    def cancel(self) -> None:
        """Cancel the running upstream query (from a CancelRequest or shutdown)."""
        token = self._cancel
        if token is None:
            return
        token.cancel()
        if not isinstance(token, AsyncCancel) and self._retry is None:
            self._retry = asyncio.ensure_future(self._cancel_again(token))

    @property
    def retry_task(self) -> asyncio.Task[None] | None:
        """The task repeating a worker-thread statement's cancel, while one runs."""
        return self._retry

    async def _cancel_again(self, token: Any) -> None:
        """Repeat a worker-thread statement's cancel every ``AsyncCancel.RETRY_S`` until it has
        ended: PostgreSQL drops a cancel that arrives before the query (or between protocol
        messages), e.g. one requested while the engine was still planning."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                await asyncio.sleep(AsyncCancel.RETRY_S)
                if self._cancel is not token:
                    return
                await loop.run_in_executor(self.executor, token.cancel)
        except RuntimeError:  # the executor is shut down: the server is stopping
            pass
        finally:
            self._retry = None

    # ---- lifecycle -------------------------------------------------------------------------
    def send_startup_info(self) -> None:
        for name in REPORTED:
            self.send(m.ParameterStatus(name, self.state.settings.get(name, "")))
        self.send(m.BackendKeyData(self.process_id, self.secret_key))

    async def serve(self) -> None:
        """The message loop; returns on Terminate or EOF. Framing errors end the session."""
        self.send_startup_info()
        await self.ready()
        while True:
            frame = await self.ch.recv()
            code = frame.code or b"?"
            if code == b"X":
                return
            if self.extended.skipping and self.extended.in_batch(code) and code != b"H":
                continue  # after an error, discard until Sync without even decoding
            if code == b"B" and not self.extended.skipping and await self.extended.pipelined(frame):
                continue
            ahead = self.extended.lookahead
            try:
                if ahead is not None and ahead[0] is frame:
                    msg: m.FrontendMessage = ahead[1]
                else:
                    msg = m.decode_frontend(code, frame.body)
            except DpsqlError as e:
                if code not in m.frontend._BY_CODE:
                    e.severity = "FATAL"  # type: ignore[misc]
                    self.send_error(e)
                    await self.ch.flush()
                    return
                self.send_error(e)
                if self.extended.in_batch(code):
                    self.extended.failed()
                    continue
                await self.ready()
                continue
            self.extended.lookahead = None
            await self.dispatch(msg)
            if self.ch.should_flush:
                await self.ch.flush()

    async def dispatch(self, msg: m.FrontendMessage) -> None:
        if isinstance(msg, m.Query):
            await self.simple_query(msg.sql)
        elif isinstance(msg, m.FunctionCall):
            self.send_error(UnsupportedSql("fast-path function calls are not supported",
                                           hint="call the function in a SELECT"))  # fmt: skip
            await self.ready()
        elif isinstance(msg, m.CopyData | m.CopyDone | m.CopyFail):
            pass  # PostgreSQL ignores COPY messages outside COPY mode
        else:
            await self.extended.handle(msg)

    # ---- simple query ----------------------------------------------------------------------
    async def simple_query(self, sql: str) -> None:
        self.extended.close_unnamed()
        try:
            if parse_pool().is_large(sql):  # split (limits first) off the event loop
                self._large = True
                texts = await parse_pool().run(None, self.engine.split, sql)
            else:
                texts = self.engine.split(sql)
        except Exception as e:
            self.send_error(e)
            self.state.fail()
            await self.ready()
            return
        if not texts:
            self.send(m.EmptyQueryResponse())
        for text in texts:
            try:
                stmt = await self.prepare(text)
                await self.run_statement(stmt, (), (), None, describe=True)
            except Exception as e:
                self.send_error(e)
                self.state.fail()
                break
        await self.ready()

    # ---- shared by both protocols ----------------------------------------------------------
    async def prepare(self, text: str) -> Statement:
        """Parse ``text`` once: a session statement, or the engine's ``Prepared``.

        A large ``text`` is read only in the parse pool, after the statement limits
        (:func:`dpsql.sql.prescan.prescan`): nothing on the event loop tokenizes it.
        A refusal here (syntax, privacy, unsupported SQL) is logged like an executed statement.
        """
        t0 = time.perf_counter()
        try:
            if parse_pool().is_large(text):
                self._large = True
                stmt: Statement = await parse_pool().run(None, self._prepare_now, text)
                return stmt
            st = parse_session_statement(text)
            if st is not None and not is_show_budget(text):  # SHOW dpsql.budget: the engine's
                return Statement(text, st, None, fingerprint(text))
            self.state.check_not_failed()
            prepared = await self.call(self.engine.prepare, text, self.ctx.analyst)
            return _engine_statement(text, prepared)
        except Exception as e:
            err = too_complex(e) if isinstance(e, RecursionError) else e
            log_statement(
                analyst=self.ctx.analyst, session=self.process_id, fingerprint=fingerprint(text),
                kind="refused", outcome=getattr(err, "sqlstate", None) or "XX000", epsilon=0.0,
                delta=0.0, cached=False, rows=0,
                latency_ms=round((time.perf_counter() - t0) * 1000, 3),
                statement=statement_text(text),
            )  # fmt: skip
            if err is not e:
                raise err from None
            raise

    def _prepare_now(self, text: str) -> Statement:
        """:meth:`prepare` of a large ``text``, all of it in a parse-pool thread."""
        prescan(text)  # before the session-statement scan and the fingerprint read it all
        st = parse_session_statement(text)
        if st is not None and not is_show_budget(text):
            return Statement(text, st, None, fingerprint(text))
        self.state.check_not_failed()
        return _engine_statement(text, self.engine.prepare(text, self.ctx.analyst))

    async def execute(
        self, stmt: Statement, params: Sequence[Any], formats: Sequence[int] | None = None
    ) -> Result | Outcome:
        """Run ``stmt``; log one line whatever happens. ``formats``: the result formats the
        client asked for, when known before running (then rows may be passed through)."""
        t0 = time.perf_counter()
        outcome = "ok"
        res: Result | Outcome | None = None
        try:
            if stmt.session is not None:
                res = self.state.apply(stmt.session)
                self.apply_effects(res)
                return res
            self.state.check_not_failed()
            if self.closing:  # else charged, then cut off when the sessions are closed
                raise DpsqlError("terminating connection due to administrator command",
                                 sqlstate="57P01", hint="reconnect when the server is back")  # fmt: skip
            if stmt.kind == "empty":
                res = Result((), [], "")
                return res
            if stmt.kind == "private":  # delivered at a data-independent moment (timing:)
                with self._busy_until_delivered():  # a shutdown's grace covers the wait too
                    res = await padded(self._run_engine(stmt, params), timing_of(self.engine))
            else:
                res = await self._run_engine(stmt, params, formats)
            return res
        except BaseException as e:
            outcome = getattr(e, "sqlstate", None) or (
                "XX000" if isinstance(e, Exception) else "cancelled"
            )
            raise
        finally:
            is_result = isinstance(res, Result)
            log_statement(
                analyst=self.ctx.analyst,
                session=self.process_id,
                fingerprint=stmt.fingerprint,
                kind=stmt.kind,
                outcome=outcome,
                epsilon=res.epsilon_spent if is_result else 0.0,  # type: ignore[union-attr]
                delta=res.delta_spent if is_result else 0.0,  # type: ignore[union-attr]
                cached=res.cached if is_result else False,  # type: ignore[union-attr]
                rows=len(res.rows) if res is not None else 0,
                latency_ms=round((time.perf_counter() - t0) * 1000, 3),
                statement=statement_text(stmt.sql),
            )

    def apply_effects(self, out: Outcome) -> None:
        for severity, code, msg in out.notices:
            self.send_notice(severity, code, msg)
        for name, value in out.parameter_status:
            self.send(m.ParameterStatus(name, value))
        if out.discard_all:
            self.extended.discard_all()
        if out.is_deallocate:
            self.extended.deallocate(out.deallocate or None)

    def row_description(self, columns: Sequence[ResultColumn], formats: Sequence[int]) -> None:
        self.ch.send(encode.row_description(tuple(columns), tuple(formats)))

    async def send_rows(
        self,
        columns: Sequence[ResultColumn],
        rows: Sequence[Any],
        formats: Sequence[int],
        raw_format: int | None = None,
    ) -> None:
        """DataRows, flushed as the buffer fills (a slow client only slows its own session).

        ``raw_format``: the rows hold PostgreSQL's bytes in that format, sent as they are.
        """
        ch = self.ch
        if raw_format is not None:
            raw_encoders(len(columns), formats, raw_format)  # checks the format
            for row in rows:
                ch.send(raw_data_row(row))
                if ch.should_flush:
                    await ch.flush()
            return
        encs = row_encoders(columns, formats)
        for row in rows:
            ch.send(data_row(row, encs))
            if ch.should_flush:
                await ch.flush()

    async def run_statement(
        self,
        stmt: Statement,
        params: Sequence[Any],
        formats: Sequence[int],
        max_rows: int | None,
        describe: bool,
    ) -> None:
        """Simple-protocol execution of one statement: [RowDescription] rows CommandComplete."""
        res = await self.execute(stmt, params, formats)
        if stmt.kind == "empty":
            self.send(m.EmptyQueryResponse())
            return
        columns, rows, tag = _shape(res)
        if isinstance(res, Result):
            for notice in res.notices:
                self.send_notice("NOTICE", "00000", notice)
        if columns and describe:
            self.row_description(columns, formats)
        if columns:
            await self.send_rows(columns, rows, formats, raw_format_of(res))
        self.ch.send(encode.command_complete(tag))


def _engine_statement(text: str, prepared: Any) -> Statement:
    if prepared.kind == "session":
        raise UnsupportedSql(
            "this session statement is not supported by dpsql",
            hint="dpsql handles SET, SHOW, RESET, BEGIN/COMMIT/ROLLBACK, SAVEPOINT, "
            "DISCARD, DEALLOCATE",
        )
    return Statement(text, None, prepared, fingerprint(text))


def _shape(res: Result | Outcome) -> tuple[Sequence[ResultColumn], Sequence[Any], str]:
    if isinstance(res, Outcome):
        return res.columns, res.rows, res.tag
    return res.columns, res.rows, res.command_tag


__all__ = ["ConnectionClosed", "EngineLike", "Session", "Statement", "as_dpsql_error"]
