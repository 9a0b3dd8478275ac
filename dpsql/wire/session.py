"""One client session after authentication: the I/O driver of :mod:`dpsql.wire.protocol`.

The protocol (a sans-IO state machine) decides what to answer; this driver reads frames from the
connection, decodes them, feeds them to it and performs what it asks for: parsing statements
(:mod:`dpsql.wire.preparing`; in a worker thread, or the parse pool for large ones), describing
and running them (the engine in a worker thread, or public and catalog statements on the event
loop through :mod:`dpsql.wire.fastpath`), and flushing. It also owns what belongs to the running
statement: its cancellation (CancelRequest, a client that went away, shutdown:
:mod:`dpsql.wire.cancelling`), the statement log, and the data-independent delivery moment of
private answers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from dpsql.errors import (
    AdminShutdown,
    DpsqlError,
    InternalError,
    QueryCanceled,
)
from dpsql.execute.context import Execution
from dpsql.execute.timing import padded, timing_of
from dpsql.result import Result
from dpsql.session import SessionContext
from dpsql.sql.prescan import prescan, too_complex
from dpsql.upstream.faults import CANCEL_HINT
from dpsql.upstream.zone import is_utc
from dpsql.wire import messages as m
from dpsql.wire.batch import batch as _batch
from dpsql.wire.cancelling import Cancelling
from dpsql.wire.conn import Channel, ConnectionClosed
from dpsql.wire.engine_api import EngineAPI, Statement, UpstreamEngine, as_dpsql_error
from dpsql.wire.engine_api import new_cancel_token as _new_cancel_token  # tests replace it here
from dpsql.wire.fastpath import run_fast
from dpsql.wire.log import fingerprint, log_statement, statement_text
from dpsql.wire.parsing import parse_pool
from dpsql.wire.preparing import (
    copy_statement,
    engine_statement,
    prepare_for_engine,
    read_statement,
)
from dpsql.wire.protocol import Protocol
from dpsql.wire.requests import (
    ROUTE_EMPTY,
    ROUTE_PRIVATE,
    ROUTE_SESSION,
    ROUTE_UPSTREAM,
    DescribeColumns,
    Flush,
    Malformed,
    Prepare,
    Request,
    Route,
    Run,
    Split,
    Steps,
    route,
)
from dpsql.wire.setting_values import REPORTED
from dpsql.wire.state import Outcome, SessionState
from dpsql.wire.statements import SessionStatement
from dpsql.wire.timeouts import client_timeout_ms, policy_timeout_ms, private_notice, within
from dpsql.wire.upstream import AsyncCancel, AsyncUpstream

if TYPE_CHECKING:
    from dpsql.policy.model import Policy

log = logging.getLogger("dpsql.wire.session")
_READY = {s: m.ReadyForQuery(s).encode() for s in "ITE"}
P = ParamSpec("P")
T = TypeVar("T")


class Session:
    """The post-authentication life of one connection."""

    def __init__(
        self,
        ch: Channel,
        engine: EngineAPI,
        executor: concurrent.futures.Executor,
        ctx: SessionContext,
        state: SessionState,
        process_id: int,
        secret_key: int,
        upstream: AsyncUpstream | None = None,
    ) -> None:
        self.ch = ch
        self.engine = engine
        self.executor = executor
        self.ctx = ctx
        self.state = state
        self.process_id = process_id
        self.secret_key = secret_key
        # the fast path needs both: an engine that renders public SQL and the async pool
        self.fast_engine = engine if isinstance(engine, UpstreamEngine) else None
        self.upstream = upstream if self.fast_engine is not None else None
        self.protocol = Protocol(ch, state, fast_path=self.upstream is not None)
        self.cancels = Cancelling(executor)  # the running statement's (dpsql.wire.cancelling)
        self.busy = False
        self.idle = asyncio.Event()
        self.idle.set()
        self._delivering: asyncio.Task[Any] | None = None  # waiting out a padded answer's moment
        self.closing = False  # the server is shutting down: run (and charge) nothing new
        self._large = False  # a large statement was parsed since the last ReadyForQuery
        self._policy_ms = policy_timeout_ms(engine)
        self._timeout_noted: str | None = None  # the client's timeout last said not to apply
        self.started = datetime.now(UTC).isoformat()  # pg_stat_activity's backend_start
        self.task: asyncio.Task[None] | None = None  # the server's task serving it
        ch.on_eof = self._client_gone

    # ---- helpers ---------------------------------------------------------------------------
    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a blocking engine call in the server's thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    def send(self, msg: m.BackendMessage) -> None:
        self.ch.send(msg.encode())

    async def _run_engine(
        self,
        stmt: Statement,
        params: Sequence[object],
        formats: Sequence[int] | None = None,
        fast: bool = False,
    ) -> Result:
        """engine.run in a worker thread (``fast``: on the upstream from the event loop),
        cancellable; cancelled if the client disconnects while it runs (:meth:`_client_gone`)."""
        fast_token = AsyncCancel() if fast else None
        token = None if fast else _new_cancel_token()
        cancels = self.cancels
        if token is not None and cancels.padding is not None:
            token.pad_start_ns = cancels.padding[1]  # (dpsql.execute.in_flight's waiters)
        cancels.token = fast_token if fast_token is not None else token
        self.busy = True
        self.idle.clear()
        if self.ch.eof:  # the client went away before its statement started
            self._client_gone()
        call: concurrent.futures.Future[Result] | None = None
        try:
            if stmt.prepared is None:
                raise InternalError("a session statement reached the engine")
            if fast_token is not None:
                if self.upstream is None or self.fast_engine is None:
                    raise InternalError("the fast path ran without an upstream")
                return await run_fast(
                    self, self.fast_engine, stmt.prepared, params, self.upstream, formats,
                    fast_token,
                )  # fmt: skip
            run = Execution(stmt.prepared, self.ctx, tuple(params), token)
            call = self.executor.submit(self.engine.run, run)
            return await asyncio.wrap_future(call)
        finally:
            if call is None or call.done():
                cancels.token = None
            else:  # this task was cancelled (pg_terminate_backend, shutdown) while the engine
                # call runs on in its thread: the token stays the session's, so a cancel sent
                # (or due at its delivery moment) is repeated until the call has ended
                # (Cancelling._cancel_again), not dropped with the task
                loop = asyncio.get_running_loop()
                call.add_done_callback(functools.partial(cancels.call_ended, loop, token))
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
        if self._delivering is not None and self.cancels.token is None:
            self._delivering.cancel()

    def _client_gone(self) -> None:
        """The client's connection ended (EOF or reset, seen by the channel as it happens, also
        while a statement runs): cancel the running statement, if any (a padded private one at
        its delivery moment, as a CancelRequest: :meth:`cancel`)."""
        if self.cancels.token is not None:
            log.info("client went away mid-query; cancelling pid=%d", self.process_id)
            self.cancel(by_client=True)

    def cancel(self, by_client: bool = False) -> None:
        """Cancel the running statement (:meth:`dpsql.wire.cancelling.Cancelling.cancel`)."""
        self.cancels.cancel(by_client, self.busy)

    @property
    def retry_task(self) -> asyncio.Task[None] | None:
        """The task repeating a worker-thread statement's cancel, while one runs."""
        return self.cancels.retry_task

    # ---- lifecycle -------------------------------------------------------------------------
    def send_startup_info(self) -> None:
        for name in REPORTED:
            self.send(m.ParameterStatus(name, self.state.settings.get(name, "")))
        self.send(m.BackendKeyData(self.process_id, self.secret_key))

    async def serve(self) -> None:
        """The message loop; returns on Terminate, EOF or a fatal protocol error. Framing
        errors end the session."""
        self.send_startup_info()
        self.ch.send(_READY[self.state.status])
        await self.ch.flush()
        ch, proto, decoder = self.ch, self.protocol, self.ch.decoder
        while True:
            frame = await ch.recv()
            code = frame.code or b"?"
            if code == b"X":
                return
            if proto.skipping and proto.discards(code):
                continue  # after an error, discard until Sync without even decoding
            if code == b"B":  # the usual run of a prepared statement: one batch
                batch = _batch(frame.body, decoder)
                if batch is not None:
                    await self._drive(proto.handle_batch(*batch))
                    continue
            try:
                msg: m.FrontendMessage | Malformed = m.decode_frontend(code, frame.body)
            except DpsqlError as e:
                msg = Malformed(code, e)
            await self._drive(proto.handle(msg))
            if proto.ended:
                return
            if ch.should_flush:
                await ch.flush()

    async def _drive(self, steps: Steps) -> None:
        """Perform what the protocol asks for until it has handled its message(s)."""
        try:
            req = next(steps)
            reply: Any
            while True:
                try:
                    cls = type(req)
                    if cls is Run:  # the usual requests first, without a call of their own
                        reply = await self.execute(*req)  # type: ignore[misc]
                    elif cls is Flush and not self._large:
                        await self.ch.flush()
                        reply = None
                    elif cls is Prepare:  # every Parse, every simple Query's statement
                        reply = await self.prepare(req.sql)  # type: ignore[union-attr]
                    else:
                        reply = await self._perform(req)
                except Exception as e:
                    req = steps.throw(e)
                else:
                    req = steps.send(reply)
        except StopIteration:
            return

    async def _perform(self, req: Request) -> Any:
        if isinstance(req, Flush):
            if req.ready and self._large:  # give a large statement's memory back first
                self._large = False
                await parse_pool().release_memory()
            await self.ch.flush()
            return None
        if isinstance(req, Prepare):
            return await self.prepare(req.sql)
        if isinstance(req, DescribeColumns):
            prepared = req.statement.prepared
            if prepared is None:
                raise InternalError("the engine was asked to describe a session statement")
            return await self.call(self.engine.describe, prepared, self.ctx, req.param_types)
        if isinstance(req, Split):
            if parse_pool().is_large(req.sql):  # split (limits first) off the event loop
                self._large = True
                return await parse_pool().run(None, self.engine.split, req.sql)
            return self.engine.split(req.sql)
        raise AssertionError(f"unknown request {req!r}")

    # ---- the client's statement_timeout (dpsql.wire.timeouts) ------------------------------
    def _note_private_timeout(self, ms: int) -> None:
        """Say once per value that a private query keeps the policy's timeout."""
        shown = self.state.settings.get("statement_timeout", "0")
        if self._timeout_noted != shown and self._policy_ms is not None:
            self._timeout_noted = shown
            self.protocol.send_notice("NOTICE", "00000", private_notice(shown, self._policy_ms))

    # ---- running statements ----------------------------------------------------------------
    async def _zone_named(self, st: SessionStatement) -> SessionStatement:
        """``SET TIME ZONE`` / ``SET TimeZone``'s value as the upstream names it (22023 in
        PostgreSQL's words for a zone it doesn't know): the zone every statement of the session
        then runs in (:mod:`dpsql.upstream.zone`). Other statements as they are."""
        engine = self.fast_engine
        if (
            engine is None
            or st.kind != "set"
            or st.value is None
            or (st.name or "").lower() != "timezone"
            or self.state.status == "E"
        ):
            return st
        return replace(st, value=await self.call(engine.backend.time_zone, st.value))

    async def check_startup_zone(self) -> None:
        """The ``TimeZone`` the session starts with (a startup parameter: PgJDBC sends the
        JVM's, libpq PGTZ's; or ``options``) as the upstream names it; a zone it doesn't know
        refuses the connection (22023), as PostgreSQL does."""
        zone = self.state.settings.get("TimeZone", "UTC")
        if self.fast_engine is not None and not is_utc(zone):
            self.state.start_zone(await self.call(self.fast_engine.backend.time_zone, zone))

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
            todo = read_statement(text)
            if isinstance(todo, Statement):
                return todo
            self.state.check_not_failed()
            if todo.copy is not None:
                return await self.call(
                    copy_statement, self.engine, self.ctx.analyst, text, todo.copy, self._policy
                )
            prepared = await self.call(self.engine.prepare, todo.query, self.ctx.analyst)
            return engine_statement(text, prepared, todo.cursor)
        except Exception as e:
            err = too_complex(e) if isinstance(e, RecursionError) else e
            log_statement(
                analyst=self.ctx.analyst, session=self.process_id, fingerprint=fingerprint(text),
                kind="refused", outcome=getattr(err, "sqlstate", None) or "XX000", epsilon=0.0,
                delta=0.0, cached=False, rows=0,
                latency_ms=round((time.perf_counter() - t0) * 1e6) / 1000,  # = round(ms, 3)
                statement=statement_text(text),
            )  # fmt: skip
            if err is not e:
                raise err from None
            raise

    def _prepare_now(self, text: str) -> Statement:
        """:meth:`prepare` of a large ``text``, all of it in a parse-pool thread."""
        prescan(text)  # before the session-statement scan and the fingerprint read it all
        todo = read_statement(text)
        if isinstance(todo, Statement):
            return todo
        self.state.check_not_failed()
        return prepare_for_engine(self.engine, self.ctx.analyst, todo, self._policy)

    @property
    def _policy(self) -> Policy | None:
        """The policy, where the engine has one (a COPY refusal's hint reads it)."""
        return self.fast_engine.policy if self.fast_engine is not None else None

    async def execute(
        self,
        stmt: Statement,
        params: Sequence[object],
        formats: Sequence[int] | None = None,
        where: Route | None = None,
    ) -> Result | Outcome:
        """Run ``stmt`` where the protocol decided (``where``; None: :func:`route`); log one
        line whatever happens. ``formats``: the result formats the client asked for, when known
        before running (then rows may be passed through)."""
        t0 = time.perf_counter()
        outcome = "ok"
        res: Result | Outcome | None = None
        if where is None:
            where = route(stmt, self.protocol.fast_path)
        try:
            if where is ROUTE_SESSION:
                assert stmt.session is not None
                res = self.protocol.apply_session(await self._zone_named(stmt.session))
                return res
            self.state.check_not_failed()
            if self.closing:  # else charged, then cut off when the sessions are closed
                raise AdminShutdown("terminating connection due to administrator command",
                                    hint="reconnect when the server is back")  # fmt: skip
            if where is ROUTE_EMPTY:
                res = Result((), [], "")
                return res
            user_ms = client_timeout_ms(self.state.settings, self._policy_ms)
            self.cancels.by_client = False
            if where is ROUTE_PRIVATE:  # delivered at a data-independent moment (timing:)
                if user_ms:
                    self._note_private_timeout(user_ms)
                timing, started = timing_of(self.engine), time.monotonic_ns()
                self.cancels.padding = None if timing is None else (timing, started)
                try:
                    with self._busy_until_delivered():  # a shutdown's grace covers the wait
                        res = await padded(self._run_engine(stmt, params), timing, started)
                finally:
                    self.cancels.padding = None
            elif user_ms:  # public or catalog: the shorter of the client's and the policy's
                run = self._run_engine(stmt, params, formats, where is ROUTE_UPSTREAM)
                res = await within(run, user_ms, self.cancel)
            else:
                res = await self._run_engine(stmt, params, formats, where is ROUTE_UPSTREAM)
            return res
        except BaseException as e:
            if self.cancels.by_client and isinstance(e, QueryCanceled):
                e.message, e.hint = "canceling statement due to user request", CANCEL_HINT
            outcome = getattr(e, "sqlstate", None) or (
                "XX000" if isinstance(e, Exception) else "cancelled"
            )
            raise
        finally:
            done = res if isinstance(res, Result) else None
            log_statement(
                analyst=self.ctx.analyst,
                session=self.process_id,
                fingerprint=stmt.fingerprint,
                kind=stmt.kind,
                outcome=outcome,
                epsilon=done.epsilon_spent if done is not None else 0.0,
                delta=done.delta_spent if done is not None else 0.0,
                cached=done.cached if done is not None else False,
                rows=len(res.rows) if res is not None else 0,
                # milliseconds to the microsecond: round(ms, 3)'s value (equal on 1e6 random
                # latencies) without round's decimal conversion (a few thousand instructions)
                latency_ms=round((time.perf_counter() - t0) * 1e6) / 1000,
                statement=statement_text(stmt.sql),
            )


__all__ = ["ConnectionClosed", "EngineAPI", "Session", "Statement", "as_dpsql_error"]
