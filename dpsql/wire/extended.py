"""The extended query protocol: Parse / Bind / Describe / Execute / Close / Sync / Flush.

Prepared statements are parsed and analysed once (the engine's ``Prepared`` is kept with the
statement, and its described columns are cached), so a Bind/Execute loop never re-parses. A portal is
executed once, on its first Execute; its rows are then sent ``max_rows`` at a time with
PortalSuspended in between, so a DP release is charged exactly once per portal.

After an error every message is discarded until Sync, which answers ReadyForQuery.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dpsql.errors import DpsqlError, ProtocolViolation
from dpsql.result import Result, ResultColumn
from dpsql.sql.bind import check_param_types
from dpsql.wire import messages as m
from dpsql.wire.batch import (
    DESCRIBE,
    DESCRIBE_EXECUTE_SYNC,
    EXECUTE,
    EXECUTE_SYNC,
    SYNC,
    BindParts,
    decode_bind,
)
from dpsql.wire.encode import command_complete, decode_param
from dpsql.wire.params import infer_param_types
from dpsql.wire.state import TEXT_OID, Outcome
from dpsql.wire.upstream import raw_format_of

if TYPE_CHECKING:
    from dpsql.wire.framing import Frame
    from dpsql.wire.session import Session, Statement

_BATCH_CODES = frozenset(b"PBDECSH")
_PARSE_COMPLETE = m.ParseComplete().encode()
_BIND_COMPLETE = m.BindComplete().encode()
_NO_DATA = m.NoData().encode()
_CLOSE_COMPLETE = m.CloseComplete().encode()
_TXN_KINDS = frozenset({"begin", "commit", "rollback", "rollback_to", "savepoint", "release"})


@dataclass
class Prepared:
    """A named (or unnamed) prepared statement of this session."""

    stmt: Statement
    param_types: tuple[int, ...]
    described: dict[bool, tuple[ResultColumn, ...]] = field(default_factory=dict)
    declared: tuple[int, ...] = ()  # the Parse's own types (0: unspecified), for the engine


@dataclass(slots=True)
class Portal:
    prepared: Prepared
    params: tuple[Any, ...]
    formats: tuple[int, ...]
    result: Result | Outcome | None = None
    pos: int = 0


def _undefined(kind: str, name: str, code: str) -> DpsqlError:
    return DpsqlError(f'{kind} "{name}" does not exist', sqlstate=code,
                      hint=f"Parse/Bind the {kind} first")  # fmt: skip


class Extended:
    """The extended-protocol state of a session: statements, portals, error skipping."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self.statements: dict[str, Prepared] = {}
        self.portals: dict[str, Portal] = {}
        self.skipping = False
        self.lookahead: tuple[Frame, m.Execute] | None = None  # the peeked Execute, decoded

    def in_batch(self, code: bytes) -> bool:
        return code[0] in _BATCH_CODES and code != b"S"

    def failed(self) -> None:
        self.skipping = True
        self.s.state.fail()

    def close_unnamed(self) -> None:
        self.statements.pop("", None)
        self.portals.pop("", None)

    def discard_all(self) -> None:
        self.statements.clear()
        self.portals.clear()

    def deallocate(self, name: str | None) -> None:
        if name is None:
            self.statements.clear()
        elif self.statements.pop(name, None) is None:
            raise _undefined("prepared statement", name, "26000")

    async def handle(self, msg: Any) -> None:
        if isinstance(msg, m.Sync):
            self.skipping = False
            if self.s.state.status == "I":
                self.portals.clear()  # portals live until their transaction ends
            else:
                self.portals.pop("", None)
            await self.s.ready()
            return
        if isinstance(msg, m.Flush):
            await self.s.ch.flush()
            return
        if self.skipping:
            return
        try:
            if isinstance(msg, m.Parse):
                await self.parse(msg)
            elif isinstance(msg, m.Bind):
                self.bind(msg)
            elif isinstance(msg, m.Describe):
                await self.describe(msg)
            elif isinstance(msg, m.Execute):
                await self.execute(msg)
            elif isinstance(msg, m.Close):
                self.close(msg)
        except Exception as e:
            self.s.send_error(e)
            self.failed()
            await self.s.ch.flush()  # as PostgreSQL, an error goes out at once

    async def pipelined(self, bind: Frame) -> bool:
        """Handle a Bind and the Describe (of its portal), Execute (of it) and Sync already
        received behind it: the messages libpq, psycopg and most drivers send to run a prepared
        statement. They are handled exactly as one by one (:meth:`handle`), without a trip
        through the session's message loop for each. False, with nothing consumed or done, for
        any other sequence (or a malformed message, reported where the loop meets it)."""
        decoder = self.s.ch.decoder
        fast = decode_bind(bind.body)
        if fast is not None and not fast[0]:  # the usual shapes (unnamed portal), at once
            if decoder.take(DESCRIBE_EXECUTE_SYNC):
                await self._run_batch(fast, True)
                return True
            if decoder.take(EXECUTE_SYNC):
                await self._run_batch(fast, False)
                return True
        got = decoder.peek_frames(3)
        if got is None:
            return False
        (d, e, sync), end = got
        if d.code != b"D" or e.code != b"E" or sync.code != b"S":
            return False
        try:
            b_msg, d_msg = m.Bind.decode(bind.body), m.Describe.decode(d.body)
            e_msg, s_msg = m.Execute.decode(e.body), m.Sync.decode(sync.body)
        except DpsqlError:
            return False
        if d_msg.kind != "P" or d_msg.name != b_msg.portal or e_msg.portal != b_msg.portal:
            return False
        decoder.consume_to(end)
        try:
            self.bind(b_msg)
            await self.describe(d_msg, executes_next=True)
            await self.execute(e_msg)
        except Exception as err:
            self.s.send_error(err)
            self.failed()  # the Sync right behind flushes the error with ReadyForQuery
        await self.handle(s_msg)
        return True

    async def _run_batch(self, bind: BindParts, describe: bool) -> None:
        """Bind (unnamed portal), [Describe it], Execute it (all rows), Sync."""
        try:
            self._bind(*bind)
            if describe:
                await self.describe(DESCRIBE, executes_next=True)
            await self.execute(EXECUTE)
        except Exception as err:
            self.s.send_error(err)
            self.failed()  # the Sync right behind flushes the error with ReadyForQuery
        await self.handle(SYNC)

    def _check_txn(self, stmt: Statement) -> None:
        if stmt.session is None or stmt.session.kind not in _TXN_KINDS:
            self.s.state.check_not_failed()

    async def parse(self, msg: m.Parse) -> None:
        if msg.statement and msg.statement in self.statements:
            raise DpsqlError(f'prepared statement "{msg.statement}" already exists',
                             sqlstate="42P05", hint="Close it first or use another name")  # fmt: skip
        stmt = await self.s.prepare(msg.sql)
        self._check_txn(stmt)
        if stmt.kind != "empty":  # PostgreSQL types the parameters at Parse
            check_param_types(
                getattr(stmt.prepared, "tree", None), stmt.param_count, msg.param_types
            )
        n = max(stmt.param_count, len(msg.param_types))
        declared = tuple(msg.param_types) + (0,) * (n - len(msg.param_types))
        oids = _param_oids(stmt, declared)
        self.statements[msg.statement] = Prepared(stmt, oids, declared=declared)
        self.s.ch.send(_PARSE_COMPLETE)

    def bind(self, msg: m.Bind) -> None:
        self._bind(msg.portal, msg.statement, msg.param_formats, msg.params, msg.result_formats)

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
            raise _undefined("prepared statement", statement, "26000")
        self._check_txn(prep.stmt)
        if portal and portal in self.portals:
            raise DpsqlError(f'portal "{portal}" already exists', sqlstate="42P03",
                             hint="Close it first or use another name")  # fmt: skip
        n = len(prep.param_types)
        if len(values) != n:
            raise ProtocolViolation(
                f"bind message supplies {len(values)} parameters, but prepared statement "
                f'"{statement}" requires {n}'
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
        self.portals[portal] = Portal(prep, used, result_formats)
        self.s.ch.send(_BIND_COMPLETE)

    async def columns(self, prep: Prepared) -> tuple[ResultColumn, ...]:
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
        key = bool(self.s.ctx.show_intervals)
        cols = prep.described.get(key)
        if cols is None:
            types = prep.declared  # not the wire's guesses for 0s: PostgreSQL infers those
            cols = tuple(
                await self.s.call(self.s.engine.describe, stmt.prepared, self.s.ctx, types)
            )
            prep.described[key] = cols
        return cols

    async def describe(self, msg: m.Describe, *, executes_next: bool = False) -> None:
        """``executes_next``: an Execute of the described portal follows (see
        :meth:`_executes_next`)."""
        if msg.kind == "S":
            prep = self.statements.get(msg.name)
            if prep is None:
                raise _undefined("prepared statement", msg.name, "26000")
            cols = await self.columns(prep)
            self.s.send(m.ParameterDescription(prep.param_types))
            formats: Sequence[int] = ()
        else:
            portal = self.portals.get(msg.name)
            if portal is None:
                raise _undefined("portal", msg.name, "34000")
            if portal.result is None and (executes_next or self._executes_next(msg.name)):
                await self._run(portal)  # its columns come with the rows: no separate describe
            res = portal.result
            cols = tuple(res.columns) if res is not None else await self.columns(portal.prepared)
            formats = portal.formats
        if cols:
            _check_formats(formats, len(cols))
            self.s.row_description(cols, formats)
        else:
            self.s.ch.send(_NO_DATA)

    def _executes_next(self, portal: str) -> bool:
        """Whether the client already sent, right behind this Describe, an Execute of ``portal``
        (drivers pipeline Bind/Describe/Execute/Sync): then running the portal now saves the
        engine a describe round trip, and the portal runs exactly once either way."""
        nxt = self.s.ch.decoder.peek()
        if nxt is None or nxt.code != b"E":
            return False
        try:
            msg = m.Execute.decode(nxt.body)
        except DpsqlError:
            return False
        self.lookahead = (nxt, msg)  # the session loop takes it instead of decoding it again
        return msg.portal == portal

    async def _run(self, portal: Portal) -> None:
        stmt = portal.prepared.stmt
        self._check_txn(stmt)
        portal.result = await self.s.execute(stmt, portal.params, portal.formats)
        if isinstance(portal.result, Result):
            for notice in portal.result.notices:
                self.s.send_notice("NOTICE", "00000", notice)

    async def execute(self, msg: m.Execute) -> None:
        portal = self.portals.get(msg.portal)
        if portal is None:
            raise _undefined("portal", msg.portal, "34000")
        stmt = portal.prepared.stmt
        if portal.result is None:
            await self._run(portal)
        if stmt.kind == "empty":
            self.s.send(m.EmptyQueryResponse())
            return
        res = portal.result
        assert res is not None
        columns = res.columns
        rows = res.rows
        tag = res.tag if isinstance(res, Outcome) else res.command_tag
        if not columns:
            self.s.ch.send(command_complete(tag))
            return
        _check_formats(portal.formats, len(columns))
        start = portal.pos
        end = len(rows) if msg.max_rows == 0 else min(len(rows), start + msg.max_rows)
        await self.s.send_rows(columns, rows[start:end], portal.formats, raw_format_of(res))
        portal.pos = end
        if end < len(rows):
            self.s.send(m.PortalSuspended())
            return
        if start > 0:
            tag = f"{tag.split(' ')[0]} {end - start}"
        self.s.ch.send(command_complete(tag))

    def close(self, msg: m.Close) -> None:
        if msg.kind == "S":
            prep = self.statements.pop(msg.name, None)
            if prep is not None:
                for name in [k for k, p in self.portals.items() if p.prepared is prep]:
                    del self.portals[name]
        else:
            self.portals.pop(msg.name, None)
        self.s.ch.send(_CLOSE_COMPLETE)


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
