"""The query protocols of one session as a sans-IO state machine: no sockets, no asyncio.

:class:`Protocol` consumes decoded frontend messages (simple query, and the extended protocol's
Parse / Bind / Describe / Execute / Close / Sync / Flush) and writes the backend messages it
answers to an :class:`Outbox`. What it cannot do itself it asks its driver for by *yielding* a
request (psycopg 3's ``generators.py`` habit): :class:`Split`, :class:`Prepare`,
:class:`DescribeColumns`, :class:`Run` and :class:`Flush`. The driver
(:class:`dpsql.wire.session.Session`) performs the request and sends the reply back into the
generator, or throws the request's exception into it::

    gen = protocol.handle(msg)
    req = next(gen)                 # StopIteration: the message is handled
    reply = await perform(req)      # or gen.throw(error)
    req = gen.send(reply)

So the whole protocol is testable with plain message sequences (``tests/unit/wire/test_protocol.py``).

One Bind/Execute path serves every client: a portal runs once, on its first Execute (or on a
Describe directly followed by its Execute: the Describe's answer waits for the next message, and
when that is the portal's Execute the rows bring their columns, with no separate describe); its
rows go out ``max_rows`` at a time with PortalSuspended in between, so a DP release is charged
exactly once per portal. Where a statement runs is decided here, once, in :func:`route`: the
session's own statements, the engine (private releases padded), or the upstream directly for
public and catalog statements (the fast path). After an error every extended-protocol message is
discarded until Sync, which answers ReadyForQuery.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from typing import Protocol as TypingProtocol

from dpsql.errors import DpsqlError, InternalError, ProtocolViolation, UnsupportedSql
from dpsql.result import Result, ResultColumn
from dpsql.sql.bind import check_param_types
from dpsql.wire import messages as m
from dpsql.wire.encode import command_complete, decode_param, row_description, row_encoders
from dpsql.wire.engine_api import Statement, as_dpsql_error
from dpsql.wire.messages.backend import data_row, raw_data_row
from dpsql.wire.params import infer_param_types
from dpsql.wire.state import TEXT_OID, Outcome, SessionState
from dpsql.wire.statements import SessionStatement

_BATCH_CODES = frozenset(b"PBDECH")  # extended-protocol messages discarded after an error
_PARSE_COMPLETE = m.ParseComplete().encode()
_BIND_COMPLETE = m.BindComplete().encode()
_NO_DATA = m.NoData().encode()
_CLOSE_COMPLETE = m.CloseComplete().encode()
_EMPTY_QUERY = m.EmptyQueryResponse().encode()
_SUSPENDED = m.PortalSuspended().encode()
_READY = {s: m.ReadyForQuery(s).encode() for s in "ITE"}
_TXN_KINDS = frozenset({"begin", "commit", "rollback", "rollback_to", "savepoint", "release"})
FAST_KINDS = frozenset({"public", "catalog"})


class Outbox(TypingProtocol):
    """Where the protocol writes encoded backend messages (the connection's send buffer)."""

    def send(self, data: bytes) -> None: ...

    @property
    def should_flush(self) -> bool: ...


class Buffer:
    """An :class:`Outbox` that keeps what is sent (tests; a driver without a connection)."""

    def __init__(self, flush_at: int = 256 * 1024) -> None:
        self.sent: list[bytes] = []
        self.size = 0
        self._flush_at = flush_at

    def send(self, data: bytes) -> None:
        self.sent.append(data)
        self.size += len(data)

    @property
    def should_flush(self) -> bool:
        return self.size >= self._flush_at

    def take(self) -> list[bytes]:
        out, self.sent, self.size = self.sent, [], 0
        return out


# ---- requests to the driver ---------------------------------------------------------------------
class Route(Enum):
    """Where a statement runs (decided by :func:`route`)."""

    SESSION = "session"  # SET / SHOW / BEGIN ...: the session state (Protocol.apply_session)
    EMPTY = "empty"  # an empty statement: nothing runs
    UPSTREAM = "upstream"  # public / catalog: the upstream directly, on the event loop
    ENGINE = "engine"  # the engine, in a worker thread
    PRIVATE = "private"  # the engine, answered at a data-independent moment (timing padding)


@dataclass(frozen=True, slots=True)
class Split:
    """Split a simple Query's text into statements. Reply: ``list[str]``."""

    sql: str


@dataclass(frozen=True, slots=True)
class Prepare:
    """Parse and check one statement's text. Reply: :class:`Statement`."""

    sql: str


@dataclass(frozen=True, slots=True)
class DescribeColumns:
    """An engine statement's result columns, without running it. Reply: its columns."""

    statement: Statement
    param_types: tuple[int, ...]  # as declared in Parse (0: unspecified)


@dataclass(frozen=True, slots=True)
class Run:
    """Run a statement. Reply: a :class:`Result` (or the :class:`Outcome` of a session
    statement, from :meth:`Protocol.apply_session`).

    ``formats``: the result formats the client asked for, when known before running (then
    PostgreSQL's bytes may be passed through); None when they are not.
    """

    statement: Statement
    params: tuple[Any, ...]
    formats: tuple[int, ...] | None
    route: Route


@dataclass(frozen=True, slots=True)
class Flush:
    """Write what the outbox holds to the client. ``ready``: a ReadyForQuery was just queued
    (the driver may give a large statement's memory back first)."""

    ready: bool = False


Request = Split | Prepare | DescribeColumns | Run | Flush
Steps = Generator[Request, Any, None]


@dataclass(frozen=True, slots=True)
class Malformed:
    """A frame the driver could not decode into a message: its type byte and the error."""

    code: bytes
    error: DpsqlError


def route(stmt: Statement, fast_path: bool) -> Route:
    """Where ``stmt`` runs: the one place that chooses the fast path."""
    kind = stmt.kind
    if kind == "session":
        return Route.SESSION
    if kind == "empty":
        return Route.EMPTY
    if kind == "private":
        return Route.PRIVATE
    if fast_path and kind in FAST_KINDS:
        return Route.UPSTREAM
    return Route.ENGINE


# ---- statements and portals ---------------------------------------------------------------------
@dataclass
class PreparedStatement:
    """A named (or unnamed) prepared statement of this session."""

    stmt: Statement
    param_types: tuple[int, ...]
    described: dict[bool, tuple[ResultColumn, ...]] = field(default_factory=dict)
    declared: tuple[int, ...] = ()  # the Parse's own types (0: unspecified), for the engine


@dataclass(slots=True)
class Portal:
    prepared: PreparedStatement
    params: tuple[Any, ...]
    formats: tuple[int, ...]
    result: Result | Outcome | None = None
    pos: int = 0


def _undefined(kind: str, name: str, code: str) -> DpsqlError:
    return DpsqlError(f'{kind} "{name}" does not exist', sqlstate=code,
                      hint=f"Parse/Bind the {kind} first")  # fmt: skip


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
        if isinstance(msg, m.Query):
            yield from self._query(msg.sql)
        elif isinstance(msg, Malformed):
            yield from self._malformed(msg)
        elif isinstance(msg, m.Sync):
            yield from self._sync()
        elif isinstance(msg, m.Flush):
            yield Flush()
        elif isinstance(msg, m.FunctionCall):
            self.send_error(UnsupportedSql("fast-path function calls are not supported",
                                           hint="call the function in a SELECT"))  # fmt: skip
            yield from self._ready()
        elif isinstance(msg, m.CopyData | m.CopyDone | m.CopyFail | m.Terminate):
            return  # PostgreSQL ignores COPY messages outside COPY mode; Terminate: the driver's
        elif self.skipping:
            return
        else:
            try:
                yield from self._extended(msg)
            except Exception as e:
                self.send_error(e)
                self.failed()
                yield Flush()  # as PostgreSQL, an error goes out at once

    def handle_all(self, msgs: Iterable[m.FrontendMessage]) -> Steps:
        """:meth:`handle` each of ``msgs`` in turn (a pipelined batch in one generator)."""
        for msg in msgs:
            yield from self.handle(msg)

    def apply_session(self, st: SessionStatement) -> Outcome:
        """Run a session statement (the driver's answer to a :class:`Run` of
        :attr:`Route.SESSION`): the state changes, its notices and ParameterStatus go out.

        Raises:
            DpsqlError: as :meth:`SessionState.apply`; 26000 for DEALLOCATE of an unknown name.
        """
        out = self.state.apply(st)
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

    # ---- small pieces ----------------------------------------------------------------------
    def send_error(self, err: BaseException) -> DpsqlError:
        e = as_dpsql_error(err)
        self.out.send(m.ErrorResponse(e.fields()).encode())
        return e

    def send_notice(self, severity: str, code: str, message: str) -> None:
        fields = {"S": severity, "V": severity, "C": code, "M": message}
        self.out.send(m.NoticeResponse(fields).encode())

    def failed(self) -> None:
        self.skipping = True
        self.state.fail()

    def _ready(self) -> Steps:
        self.out.send(_READY[self.state.status])
        yield Flush(ready=True)

    def _deallocate(self, name: str | None) -> None:
        if name is None:
            self.statements.clear()
        elif self.statements.pop(name, None) is None:
            raise _undefined("prepared statement", name, "26000")

    def _check_txn(self, stmt: Statement) -> None:
        if stmt.session is None or stmt.session.kind not in _TXN_KINDS:
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
                res = yield self._run(stmt, (), ())
                if stmt.kind == "empty":
                    self.out.send(_EMPTY_QUERY)
                    continue
                self._notices(res)
                columns, rows, tag = _shape(res)
                if columns:
                    self.out.send(row_description(tuple(columns), ()))
                    yield from self._rows(columns, rows, (), res)
                self.out.send(command_complete(tag))
            except Exception as e:
                self.send_error(e)
                self.state.fail()
                break
        yield from self._ready()

    def _run(self, stmt: Statement, params: tuple[Any, ...], formats: tuple[int, ...]) -> Run:
        return Run(stmt, params, formats, route(stmt, self.fast_path))

    # ---- the extended protocol -------------------------------------------------------------
    def _extended(self, msg: m.FrontendMessage) -> Steps:
        if isinstance(msg, m.Bind):
            self._bind(msg)
        elif isinstance(msg, m.Execute):
            yield from self._execute(msg)
        elif isinstance(msg, m.Describe):
            yield from self._describe(msg)
        elif isinstance(msg, m.Parse):
            yield from self._parse(msg)
        elif isinstance(msg, m.Close):
            self._close(msg)

    def _sync(self) -> Steps:
        self.skipping = False
        if self.state.status == "I":
            self.portals.clear()  # portals live until their transaction ends
        else:
            self.portals.pop("", None)
        yield from self._ready()

    def _malformed(self, msg: Malformed) -> Steps:
        if msg.code not in m.frontend._BY_CODE:  # not a message at all: the stream is lost
            msg.error.severity = "FATAL"  # type: ignore[misc]
            self.send_error(msg.error)
            self.ended = True
            yield Flush()
            return
        self.send_error(msg.error)
        if msg.code[0] in _BATCH_CODES:
            self.failed()
            return
        yield from self._ready()

    def _parse(self, msg: m.Parse) -> Steps:
        if msg.statement and msg.statement in self.statements:
            raise DpsqlError(f'prepared statement "{msg.statement}" already exists',
                             sqlstate="42P05", hint="Close it first or use another name")  # fmt: skip
        stmt: Statement = yield Prepare(msg.sql)
        self._check_txn(stmt)
        if stmt.kind != "empty":  # PostgreSQL types the parameters at Parse
            check_param_types(
                getattr(stmt.prepared, "tree", None), stmt.param_count, msg.param_types
            )
        n = max(stmt.param_count, len(msg.param_types))
        declared = tuple(msg.param_types) + (0,) * (n - len(msg.param_types))
        oids = _param_oids(stmt, declared)
        self.statements[msg.statement] = PreparedStatement(stmt, oids, declared=declared)
        self.out.send(_PARSE_COMPLETE)

    def _bind(self, msg: m.Bind) -> None:
        prep = self.statements.get(msg.statement)
        if prep is None:
            raise _undefined("prepared statement", msg.statement, "26000")
        self._check_txn(prep.stmt)
        portal = msg.portal
        if portal and portal in self.portals:
            raise DpsqlError(f'portal "{portal}" already exists', sqlstate="42P03",
                             hint="Close it first or use another name")  # fmt: skip
        values, pf = msg.params, msg.param_formats
        n = len(prep.param_types)
        if len(values) != n:
            raise ProtocolViolation(
                f"bind message supplies {len(values)} parameters, but prepared statement "
                f'"{msg.statement}" requires {n}'
            )
        if len(pf) not in (0, 1, n):
            raise ProtocolViolation(
                f"bind message has {len(pf)} parameter formats but {n} parameters"
            )
        params = tuple(
            decode_param(
                v, prep.param_types[i], pf[i] if len(pf) > 1 else (pf[0] if pf else 0), i + 1
            )  # fmt: skip
            for i, v in enumerate(values)
        )
        # Parse may declare more types than the statement uses: PostgreSQL checks and ignores
        # the extra values, so the engine gets only the statement's own.
        used = params[: prep.stmt.param_count]
        self.portals[portal] = Portal(prep, used, msg.result_formats)
        self.out.send(_BIND_COMPLETE)

    def _columns(
        self, prep: PreparedStatement
    ) -> Generator[Request, Any, tuple[ResultColumn, ...]]:
        """Result columns of a statement (cached; described without reading data)."""
        stmt = prep.stmt
        if stmt.session is not None:
            st = stmt.session
            if st.kind != "show":
                return ()
            if st.name == "all":
                return tuple(ResultColumn(n, TEXT_OID) for n in ("name", "setting", "description"))
            return (ResultColumn(st.name or "", TEXT_OID),)
        if stmt.kind == "empty":
            return ()
        key = bool(self.state.ctx.show_intervals)
        cols = prep.described.get(key)
        if cols is None:
            # the Parse's own types, not the wire's guesses for 0s: PostgreSQL infers those
            cols = tuple((yield DescribeColumns(stmt, prep.declared)))
            prep.described[key] = cols
        return cols

    def _describe(self, msg: m.Describe) -> Steps:
        if msg.kind == "S":
            prep = self.statements.get(msg.name)
            if prep is None:
                raise _undefined("prepared statement", msg.name, "26000")
            cols = yield from self._columns(prep)
            self.out.send(m.ParameterDescription(prep.param_types).encode())
            self._row_description(cols, ())
            return
        portal = self.portals.get(msg.name)
        if portal is None:
            raise _undefined("portal", msg.name, "34000")
        if portal.result is None:
            self._describing = (msg, portal)  # answered when the next message is known
            return
        self._row_description(tuple(portal.result.columns), portal.formats)

    def _settle_describe(self, nxt: m.FrontendMessage | Malformed) -> Steps:
        """Answer the Describe of a portal that has not run. When ``nxt`` executes that portal,
        run it now: its columns come with the rows and it runs exactly once either way; else
        describe it without running it."""
        assert self._describing is not None
        msg, portal = self._describing
        self._describing = None
        try:
            if isinstance(nxt, m.Execute) and nxt.portal == msg.name:
                yield from self._run_portal(portal)
                assert portal.result is not None
                cols = tuple(portal.result.columns)
            else:
                cols = yield from self._columns(portal.prepared)
            self._row_description(cols, portal.formats)
        except Exception as e:
            self.send_error(e)
            self.failed()
            yield Flush()

    def _row_description(self, cols: tuple[ResultColumn, ...], formats: tuple[int, ...]) -> None:
        if cols:
            _check_formats(formats, len(cols))
            self.out.send(row_description(cols, formats))
        else:
            self.out.send(_NO_DATA)

    def _run_portal(self, portal: Portal) -> Steps:
        stmt = portal.prepared.stmt
        self._check_txn(stmt)
        portal.result = yield self._run(stmt, portal.params, portal.formats)
        self._notices(portal.result)

    def _execute(self, msg: m.Execute) -> Steps:
        portal = self.portals.get(msg.portal)
        if portal is None:
            raise _undefined("portal", msg.portal, "34000")
        if portal.result is None:
            yield from self._run_portal(portal)
        if portal.prepared.stmt.kind == "empty":
            self.out.send(_EMPTY_QUERY)
            return
        res = portal.result
        assert res is not None
        columns, rows, tag = _shape(res)
        if not columns:
            self.out.send(command_complete(tag))
            return
        _check_formats(portal.formats, len(columns))
        start = portal.pos
        end = len(rows) if msg.max_rows <= 0 else min(len(rows), start + msg.max_rows)
        yield from self._rows(columns, rows[start:end], portal.formats, res)
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

    def _rows(
        self,
        columns: Sequence[ResultColumn],
        rows: Sequence[Any],
        formats: tuple[int, ...],
        res: Result | Outcome,
    ) -> Steps:
        """DataRows, flushed as the outbox fills (a slow client only slows its own session).
        Rows fetched as PostgreSQL's bytes (:func:`raw_format_of`) are sent as they are."""
        out = self.out
        raw = getattr(res, "raw_format", None)
        if raw is not None:
            if uniform(formats) != raw:
                raise InternalError("rows fetched in one format were asked for in another")
            for row in rows:
                out.send(raw_data_row(row))
                if out.should_flush:
                    yield Flush()
            return
        encs = row_encoders(columns, formats)
        for row in rows:
            out.send(data_row(row, encs))
            if out.should_flush:
                yield Flush()


def uniform(formats: Sequence[int] | None) -> int | None:
    """The one result format of every column (none given: text), or None (mixed, or unknown).

    >>> uniform(()), uniform((1,)), uniform((1, 1)), uniform((0, 1)), uniform(None)
    (0, 1, 1, None, None)
    """
    if formats is None:
        return None
    if not formats:
        return 0
    first = formats[0]
    if first not in (0, 1):
        return None
    return first if len(formats) == 1 or all(f == first for f in formats) else None


def _shape(res: Result | Outcome) -> tuple[Sequence[ResultColumn], Sequence[Any], str]:
    if isinstance(res, Outcome):
        return res.columns, res.rows, res.tag
    return res.columns, res.rows, res.command_tag


def _param_oids(stmt: Statement, declared: tuple[int, ...]) -> tuple[int, ...]:
    """Parameter types: as declared in Parse, else as the engine inferred them (an optional
    ``Prepared.param_types``), else as :mod:`dpsql.wire.params` infers them, else text."""
    inferred: Sequence[int] = ()
    if stmt.prepared is not None and 0 in declared:
        inferred = getattr(stmt.prepared, "param_types", None) or infer_param_types(stmt.prepared)
    out = []
    for i, t in enumerate(declared):
        if t == 0 and i < len(inferred) and inferred[i]:
            t = int(inferred[i])
        out.append(t or TEXT_OID)
    return tuple(out)


def _check_formats(formats: Sequence[int], ncols: int) -> None:
    if len(formats) not in (0, 1, ncols):
        raise ProtocolViolation(
            f"bind message has {len(formats)} result formats but query has {ncols} columns"
        )
