"""The sans-IO protocol state machine (dpsql.wire.protocol), driven directly: message sequences in,
backend messages and requests out. No sockets, no event loop: a small synchronous driver answers
the protocol's requests with the protocol-layer fake engine."""

from __future__ import annotations

from typing import Any

import pytest

from dpsql.execute.context import Execution
from dpsql.result import Result
from dpsql.session import SessionContext
from dpsql.wire import messages as m
from dpsql.wire.batch import decode_bind
from dpsql.wire.engine_api import Statement
from dpsql.wire.framing import FrameDecoder
from dpsql.wire.protocol import Protocol
from dpsql.wire.requests import (
    Buffer,
    DescribeColumns,
    Flush,
    Malformed,
    Prepare,
    Route,
    Run,
    Split,
    route,
)
from dpsql.wire.state import SessionState
from dpsql.wire.statements import parse_session_statement
from tests.wire_support import FakeEngine, fake_prepared

FLUSH = "<flush>"


class Driver:
    """Performs the protocol's requests at once, records them, decodes what it sent."""

    def __init__(self, fast_path: bool = True, flush_at: int = 1 << 20) -> None:
        self.engine = FakeEngine()
        self.out = Buffer(flush_at)
        self.state = SessionState(SessionContext(analyst="ana"), {})
        self.proto = Protocol(self.out, self.state, fast_path=fast_path)
        self.requests: list[Any] = []
        self._received: list[Any] = []

    def perform(self, req: Any) -> Any:
        self.requests.append(req)
        if isinstance(req, Split):
            return self.engine.split(req.sql)
        if isinstance(req, Prepare):
            st = parse_session_statement(req.sql)
            if st is not None:
                return Statement(req.sql, st, None, "fp")
            if not req.sql.strip():
                return Statement(req.sql, None, fake_prepared(req.sql, "empty"), "fp")
            return Statement(req.sql, None, self.engine.prepare(req.sql), "fp")
        if isinstance(req, DescribeColumns):
            return self.engine.describe(req.statement.prepared, self.state.ctx, req.param_types)
        if isinstance(req, Run):
            if req.route is Route.SESSION:
                assert req.statement.session is not None
                return self.proto.apply_session(req.statement.session)
            if req.route is Route.EMPTY:
                return Result((), [], "")
            self.state.check_not_failed()
            return self.engine.run(Execution(req.statement.prepared, self.state.ctx, req.params))
        if isinstance(req, Flush):
            self._drain()
            self._received.append(FLUSH)
            return None
        raise AssertionError(req)

    def _drain(self) -> None:
        dec = FrameDecoder(1 << 30)
        dec.startup = False
        dec.feed(b"".join(self.out.take()))
        while (f := dec.next()) is not None:
            assert f.code is not None
            self._received.append(m.decode_backend(f.code, f.body))

    def feed(self, *msgs: Any) -> list[Any]:
        """Backend messages (and flushes) answering ``msgs``."""
        for msg in msgs:
            self._drive(self.proto.handle(msg))
        return self._answers()

    def feed_batch(self, bind: m.Bind, *tail: Any) -> list[Any]:
        """As :meth:`feed`, through the batch lane (the Bind's fields handed over decoded)."""
        parts = decode_bind(bind.encode()[5:])
        assert parts is not None
        self._drive(self.proto.handle_batch(parts, tail))
        return self._answers()

    def _drive(self, steps: Any) -> None:
        try:
            req = next(steps)
            while True:
                try:
                    reply = self.perform(req)
                except Exception as e:
                    req = steps.throw(e)
                else:
                    req = steps.send(reply)
        except StopIteration:
            pass

    def _answers(self) -> list[Any]:
        self._drain()
        got, self._received = self._received, []
        return got

    def runs(self) -> list[Run]:
        return [r for r in self.requests if isinstance(r, Run)]


def names(got: list[Any]) -> list[str]:
    return [x if x == FLUSH else type(x).__name__ for x in got]


def errors(got: list[Any]) -> list[str]:
    return [x.fields["C"] for x in got if isinstance(x, m.ErrorResponse)]


def test_bind_execute_sync_runs_once_and_answers_ready() -> None:
    d = Driver()
    got = d.feed(m.Parse("", "SELECT gen 2"), m.Bind("", ""), m.Execute(""), m.Sync())
    assert names(got) == ["ParseComplete", "BindComplete", "DataRow", "DataRow",
                          "CommandComplete", "ReadyForQuery", FLUSH]  # fmt: skip
    assert got[-3].tag == "SELECT 2" and got[-2].status == "I"
    assert len(d.engine.executed) == 1


def test_error_discards_until_sync_then_recovers() -> None:
    d = Driver()
    got = d.feed(
        m.Parse("", "bad sql"), m.Bind("", ""), m.Describe("P", ""), m.Execute(""),
        m.Close("S", ""), m.Sync(),
    )  # fmt: skip
    assert names(got) == ["ErrorResponse", FLUSH, "ReadyForQuery", FLUSH]
    assert errors(got) == ["42601"] and got[-2].status == "I"
    assert d.engine.executed == [] and not d.proto.skipping
    got = d.feed(m.Parse("", "SELECT 1"), m.Bind("", ""), m.Execute(""), m.Sync())
    assert names(got)[:4] == ["ParseComplete", "BindComplete", "DataRow", "CommandComplete"]


def test_error_in_a_transaction_block_fails_it_until_rollback() -> None:
    d = Driver()
    assert d.feed(m.Query("BEGIN"))[-2].status == "T"
    got = d.feed(m.Parse("", "SELECT raw FROM people"), m.Bind("", ""), m.Sync())
    assert errors(got) == ["42501"] and got[-2].status == "E"
    got = d.feed(m.Parse("", "SELECT 1"), m.Sync())
    assert errors(got) == ["25P02"] and got[-2].status == "E"
    got = d.feed(m.Query("ROLLBACK"))
    assert got[-2].status == "I" and got[0].tag == "ROLLBACK"


def test_flush_while_skipping_still_flushes() -> None:
    d = Driver()
    got = d.feed(m.Parse("", "bad"), m.Flush(), m.Execute(""), m.Flush())
    assert names(got) == ["ErrorResponse", FLUSH, FLUSH, FLUSH]


def test_portal_suspends_at_max_rows_and_runs_once() -> None:
    d = Driver()
    got = d.feed(
        m.Parse("s", "SELECT gen 5"), m.Bind("p", "s"), m.Execute("p", 2), m.Execute("p", 2),
        m.Execute("p", 2), m.Sync(),
    )  # fmt: skip
    assert names(got) == [
        "ParseComplete", "BindComplete", "DataRow", "DataRow", "PortalSuspended",
        "DataRow", "DataRow", "PortalSuspended", "DataRow", "CommandComplete",
        "ReadyForQuery", FLUSH,
    ]  # fmt: skip
    assert [r.values[0] for r in got if isinstance(r, m.DataRow)] == [b"0", b"1", b"2", b"3", b"4"]
    assert got[-3].tag == "SELECT 1"  # the rows of the last Execute, as PostgreSQL counts
    assert len(d.engine.executed) == 1


def test_suspended_portal_lives_in_a_transaction_and_dies_at_sync_when_idle() -> None:
    d = Driver()
    d.feed(m.Query("BEGIN"))
    d.feed(m.Parse("s", "SELECT gen 3"), m.Bind("p", "s"), m.Execute("p", 1), m.Sync())
    got = d.feed(m.Execute("p", 0), m.Sync())
    assert names(got) == ["DataRow", "DataRow", "CommandComplete", "ReadyForQuery", FLUSH]
    d.feed(m.Query("COMMIT"))
    d.feed(m.Bind("p", "s"), m.Execute("p", 1), m.Sync())  # idle: Sync closes the portal
    got = d.feed(m.Execute("p"), m.Sync())
    assert errors(got) == ["34000"]


def test_unnamed_statement_and_portal_are_replaced_named_ones_are_not() -> None:
    d = Driver()
    got = d.feed(
        m.Parse("", "SELECT gen 1"), m.Parse("", "SELECT gen 2"), m.Bind("", ""),
        m.Bind("", ""), m.Execute(""), m.Sync(),
    )  # fmt: skip
    assert errors(got) == [] and sum(isinstance(x, m.DataRow) for x in got) == 2
    got = d.feed(m.Parse("s", "SELECT 1"), m.Parse("s", "SELECT 1"), m.Sync())
    assert errors(got) == ["42P05"]
    d.feed(m.Query("BEGIN"))
    got = d.feed(m.Bind("p", "s"), m.Bind("p", "s"), m.Sync())
    assert errors(got) == ["42P03"]


def test_simple_query_closes_the_unnamed_statement() -> None:
    d = Driver()
    d.feed(m.Parse("", "SELECT 1"), m.Sync())
    d.feed(m.Query("SELECT 1"))
    got = d.feed(m.Bind("", ""), m.Sync())
    assert errors(got) == ["26000"]


def test_describe_statement_sends_parameters_and_columns_and_caches_them() -> None:
    d = Driver()
    got = d.feed(m.Parse("s", "SELECT echo $1"), m.Describe("S", "s"), m.Describe("S", "s"),
                 m.Sync())  # fmt: skip
    assert names(got) == ["ParseComplete", "ParameterDescription", "RowDescription",
                          "ParameterDescription", "RowDescription", "ReadyForQuery", FLUSH]  # fmt: skip
    assert got[1].type_oids == (25,)
    assert d.engine.describes["SELECT echo $1"] == 1 and d.engine.executed == []


def test_describe_portal_then_execute_runs_once_without_a_describe() -> None:
    d = Driver()
    got = d.feed(m.Parse("", "SELECT gen 2"), m.Bind("", ""), m.Describe("P", ""),
                 m.Execute(""), m.Sync())  # fmt: skip
    assert names(got) == ["ParseComplete", "BindComplete", "RowDescription", "DataRow",
                          "DataRow", "CommandComplete", "ReadyForQuery", FLUSH]  # fmt: skip
    assert d.engine.describes["SELECT gen 2"] == 0 and len(d.engine.executed) == 1


@pytest.mark.parametrize("then", [m.Sync(), m.Flush(), m.Close("P", "")], ids=repr)
def test_describe_portal_not_followed_by_its_execute_describes_without_running(then: Any) -> None:
    d = Driver()
    got = d.feed(m.Parse("", "SELECT gen 2"), m.Bind("", ""), m.Describe("P", ""), then)
    assert names(got)[:3] == ["ParseComplete", "BindComplete", "RowDescription"]
    assert d.engine.describes["SELECT gen 2"] == 1 and d.engine.executed == []


def test_describe_portal_of_another_portal_execute_describes_it() -> None:
    d = Driver()
    d.feed(m.Query("BEGIN"))
    got = d.feed(
        m.Parse("s", "SELECT gen 1"), m.Bind("a", "s"), m.Bind("b", "s"), m.Describe("P", "a"),
        m.Execute("b"), m.Execute("a"), m.Sync(),
    )  # fmt: skip
    assert names(got)[:6] == ["ParseComplete", "BindComplete", "BindComplete", "RowDescription",
                              "DataRow", "CommandComplete"]  # fmt: skip
    assert d.engine.describes["SELECT gen 1"] == 1 and len(d.engine.executed) == 2


def test_describe_of_an_executed_portal_answers_from_its_result() -> None:
    d = Driver()
    d.feed(m.Query("BEGIN"))
    got = d.feed(m.Parse("s", "SELECT gen 3"), m.Bind("p", "s"), m.Execute("p", 1),
                 m.Describe("P", "p"), m.Sync())  # fmt: skip
    assert names(got)[2:5] == ["DataRow", "PortalSuspended", "RowDescription"]
    assert d.engine.describes["SELECT gen 3"] == 0


def test_describe_portal_whose_run_fails_reports_it_at_the_describe() -> None:
    d = Driver()
    d.feed(m.Parse("s", "SELECT echo $1", (23,)), m.Sync())
    got = d.feed(m.Bind("", "s", (0,), (b"x",)), m.Describe("P", ""), m.Execute(""), m.Sync())
    assert errors(got) == ["22P02"] and d.engine.executed == []  # the Bind failed: nothing runs


def test_unknown_names_have_their_sqlstates() -> None:
    d = Driver()
    got = d.feed(m.Bind("", "nope"), m.Sync(), m.Execute("nope"), m.Sync(),
                 m.Describe("S", "nope"), m.Sync(), m.Describe("P", "nope"), m.Sync())  # fmt: skip
    assert errors(got) == ["26000", "34000", "26000", "34000"]


def test_close_statement_closes_its_portals() -> None:
    d = Driver()
    d.feed(m.Query("BEGIN"))
    got = d.feed(m.Parse("s", "SELECT 1"), m.Bind("p", "s"), m.Close("S", "s"),
                 m.Close("S", "never"), m.Execute("p"), m.Sync())  # fmt: skip
    assert names(got)[:4] == ["ParseComplete", "BindComplete", "CloseComplete", "CloseComplete"]
    assert errors(got) == ["34000"]


def test_bind_checks_parameter_counts_and_formats() -> None:
    d = Driver()
    d.feed(m.Parse("s", "SELECT echo $1 $2"), m.Sync())
    got = d.feed(m.Bind("", "s", (), (b"a",)), m.Sync())
    assert errors(got) == ["08P01"]
    got = d.feed(m.Bind("", "s", (0, 0, 0), (b"a", b"b")), m.Sync())
    assert errors(got) == ["08P01"]
    got = d.feed(m.Bind("", "s", (0,), (b"a", None)), m.Execute(""), m.Sync())
    assert errors(got) == [] and d.engine.executed[-1][2] == ("a", None)


def test_simple_query_stops_at_the_first_error_and_answers_ready_once() -> None:
    d = Driver()
    got = d.feed(m.Query("SELECT 1; SELECT raw FROM people; SELECT gen 3"))
    assert names(got) == ["RowDescription", "DataRow", "CommandComplete", "ErrorResponse",
                          "ReadyForQuery", FLUSH]  # fmt: skip
    assert [x[0] for x in d.engine.executed] == ["SELECT 1"]


def test_empty_simple_query_and_empty_statement() -> None:
    d = Driver()
    assert names(d.feed(m.Query(""))) == ["EmptyQueryResponse", "ReadyForQuery", FLUSH]
    got = d.feed(m.Parse("", " "), m.Bind("", ""), m.Execute(""), m.Sync())
    assert names(got)[:3] == ["ParseComplete", "BindComplete", "EmptyQueryResponse"]


def test_session_statements_run_in_the_protocol_with_their_effects() -> None:
    d = Driver()
    got = d.feed(m.Query("SET application_name = 'x'; SHOW application_name"))
    assert [type(x).__name__ for x in got][:2] == ["ParameterStatus", "CommandComplete"]
    assert got[3].values == (b"x",)
    d.feed(m.Parse("s", "SELECT 1"), m.Sync())
    got = d.feed(m.Query("DEALLOCATE s"), m.Query("DEALLOCATE s"))
    assert errors(got) == ["26000"]
    assert [r.route for r in d.runs()][-2:] == [Route.SESSION, Route.SESSION]


def test_route_is_decided_once_by_kind_and_fast_path() -> None:
    def stmt(kind: str) -> Statement:
        return Statement("x", None, fake_prepared("x", kind), "fp")

    set_x = Statement("SET a = 1", parse_session_statement("SET a = 1"), None, "fp")
    assert route(set_x, True) is Route.SESSION
    assert route(stmt("public"), True) is Route.UPSTREAM
    assert route(stmt("catalog"), True) is Route.UPSTREAM
    assert route(stmt("public"), False) is Route.ENGINE
    assert route(stmt("private"), True) is Route.PRIVATE
    assert route(stmt("explain"), True) is Route.ENGINE
    assert route(stmt("dpsql"), True) is Route.ENGINE
    assert route(stmt("catalog"), False) is Route.ENGINE
    assert route(stmt("empty"), True) is Route.EMPTY
    d = Driver(fast_path=True)
    d.feed(m.Query("SELECT 1; SELECT count FROM people"))
    assert [r.route for r in d.runs()] == [Route.UPSTREAM, Route.PRIVATE]
    assert d.runs()[0].formats == ()  # text, known before running: may be passed through


def test_rows_are_flushed_as_the_outbox_fills() -> None:
    d = Driver(flush_at=64)
    got = d.feed(m.Query("SELECT gen 50"))
    assert names(got).count(FLUSH) > 5
    assert sum(isinstance(x, m.DataRow) for x in got) == 50


def test_malformed_messages() -> None:
    d = Driver()
    got = d.feed(Malformed(b"B", _violation()), m.Execute(""), m.Sync())
    assert names(got) == ["ErrorResponse", "ReadyForQuery", FLUSH] and not d.proto.ended
    got = d.feed(Malformed(b"Q", _violation()))
    assert names(got) == ["ErrorResponse", "ReadyForQuery", FLUSH]
    got = d.feed(Malformed(b"z", _violation()))
    assert names(got) == ["ErrorResponse", FLUSH] and d.proto.ended
    assert got[0].fields["S"] == "FATAL"


def test_function_call_is_refused_and_copy_messages_are_ignored() -> None:
    d = Driver()
    got = d.feed(m.FunctionCall(b"\x00"), m.CopyData(b"x"), m.CopyDone())
    assert names(got) == ["ErrorResponse", "ReadyForQuery", FLUSH] and errors(got) == ["0A000"]


def test_discards_tells_the_driver_what_it_may_skip_unread() -> None:
    d = Driver()
    assert not d.proto.discards(b"E")
    d.feed(m.Parse("", "bad"))
    assert d.proto.discards(b"E") and d.proto.discards(b"B")
    assert not d.proto.discards(b"S") and not d.proto.discards(b"H")
    assert not d.proto.discards(b"Q")


def _violation() -> Any:
    from dpsql.errors import ProtocolViolation

    return ProtocolViolation("invalid message format")


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        ("SELECT gen 3", ()),
        ("SELECT echo $1", (b"x",)),
        ("SELECT echo $1", ()),  # wrong parameter count: the Bind fails
        ("SELECT count FROM people", ()),
        ("SHOW application_name", ()),
    ],
)
@pytest.mark.parametrize("describe", [True, False], ids=["describe", "no-describe"])
def test_the_batch_lane_answers_as_message_by_message(
    sql: str, params: tuple[bytes, ...], describe: bool
) -> None:
    bind = m.Bind("", "s", (), params, (1,))
    tail = ((m.Describe("P", ""),) if describe else ()) + (m.Execute(""), m.Sync())
    one, batch = Driver(), Driver()
    for d in (one, batch):
        d.feed(m.Parse("s", sql), m.Sync())
    assert batch.feed_batch(bind, *tail) == one.feed(bind, *tail)
    assert batch.runs() == one.runs() and batch.engine.describes == one.engine.describes
