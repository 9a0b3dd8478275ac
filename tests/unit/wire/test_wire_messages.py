"""Every protocol message round-trips through encode/decode; malformed bodies are 08P01 errors."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpsql.errors import ProtocolViolation
from dpsql.wire import messages as m
from dpsql.wire.framing import FrameDecoder

FRONTEND = [
    m.Query("SELECT 1; SELECT 'é'"),
    m.Parse("s1", "SELECT $1::int", (23,)),
    m.Parse("", "SELECT 1"),
    m.Bind("p", "s", (0, 1), (b"12", None, b"\x00\x01"), (1,)),
    m.Bind("", ""),
    m.Describe("S", "s1"),
    m.Describe("P", ""),
    m.Execute("p", 10),
    m.Close("S", "s1"),
    m.Close("P", "p"),
    m.Sync(),
    m.Flush(),
    m.Terminate(),
    m.CopyData(b"\x00abc"),
    m.CopyDone(),
    m.CopyFail("stop"),
    m.FunctionCall(b"\x00\x00\x00\x01"),
]

BACKEND = [
    m.AuthenticationOk(),
    m.AuthenticationCleartextPassword(),
    m.AuthenticationMD5Password(b"abcd"),
    m.AuthenticationSASL(("SCRAM-SHA-256", "SCRAM-SHA-256-PLUS")),
    m.AuthenticationSASLContinue(b"r=abc,s=xyz,i=4096"),
    m.AuthenticationSASLFinal(b"v=sig"),
    m.ParameterStatus("server_version", "16.0"),
    m.BackendKeyData(1234, -5),
    m.ReadyForQuery("T"),
    m.RowDescription((m.FieldDescription("n", 20, -1, 8, 1), m.FieldDescription("é", 25))),
    m.DataRow((b"1", None, b"")),
    m.CommandComplete("SELECT 3"),
    m.ErrorResponse({"S": "ERROR", "C": "42501", "M": "no"}),
    m.NoticeResponse({"S": "NOTICE", "M": "hi"}),
    m.ParameterDescription((23, 25)),
    m.NegotiateProtocolVersion(0, ("_pq_.x",)),
    m.EmptyQueryResponse(),
    m.ParseComplete(),
    m.BindComplete(),
    m.CloseComplete(),
    m.NoData(),
    m.PortalSuspended(),
]

STARTUP = [
    m.StartupMessage(parameters={"user": "ana", "database": "db"}),
    m.SSLRequest(),
    m.GSSENCRequest(),
    m.CancelRequest(7, -99),
]


@pytest.mark.parametrize("msg", FRONTEND, ids=lambda x: type(x).__name__)
def test_frontend_round_trip(msg: m.FrontendMessage) -> None:
    wire = msg.encode()
    assert struct.unpack("!I", wire[1:5])[0] == len(wire) - 1
    assert m.decode_frontend(wire[:1], wire[5:]) == msg


@pytest.mark.parametrize("msg", BACKEND, ids=lambda x: type(x).__name__)
def test_backend_round_trip(msg: object) -> None:
    wire = msg.encode()  # type: ignore[attr-defined]
    assert m.decode_backend(wire[:1], wire[5:]) == msg


@pytest.mark.parametrize("msg", STARTUP, ids=lambda x: type(x).__name__)
def test_startup_round_trip(msg: m.StartupPacket) -> None:
    wire = msg.encode()
    assert struct.unpack("!I", wire[:4])[0] == len(wire)
    assert m.decode_startup(wire[4:]) == msg


def test_sasl_messages_round_trip() -> None:
    for msg in (m.SASLInitialResponse("SCRAM-SHA-256", b"n,,n=,r=x"), m.SASLResponse(b"c=biws")):
        wire = msg.encode()
        assert type(msg).decode(wire[5:]) == msg
    assert m.PasswordMessage.decode(m.PasswordMessage("pw").encode()[5:]).password == "pw"


@pytest.mark.parametrize(
    ("code", "body"),
    [
        (b"Q", b"SELECT 1"),  # no terminator
        (b"Q", b"SELECT 1\x00junk"),  # trailing bytes
        (b"Q", b"\xff\xfe\x00"),  # not UTF-8
        (b"D", b""),  # empty Describe
        (b"D", b"X\x00"),  # bad subtype
        (b"E", b"p\x00\x00\x00"),  # short Int32
        (b"B", b"\x00\x00\x00\x00\x00\x01\xff\xff\xff\xf9\x00\x00"),  # length -7
        (b"B", b"\x00\x00\x00\x00\x00\x01\x00\x00\x00\x64\x00\x00"),  # value past the end
        (b"B", b"\x00\x00\x00\x01\x00\x07\x00\x00\x00\x00"),  # format 7
        (b"P", b"\x00\x00\xff\xff"),  # negative count
        (b"z", b""),  # unknown type
    ],
)
def test_malformed_bodies_are_protocol_violations(code: bytes, body: bytes) -> None:
    with pytest.raises(ProtocolViolation) as e:
        m.decode_frontend(code, body)
    assert e.value.sqlstate in ("08P01", "22021")


@given(code=st.binary(min_size=1, max_size=1), body=st.binary(max_size=64))
def test_decoder_fuzz_only_raises_protocol_violation(code: bytes, body: bytes) -> None:
    """Property: any bytes decode to a message or a ProtocolViolation, nothing else."""
    try:
        msg = m.decode_frontend(code, body)
    except ProtocolViolation:
        return
    assert msg.encode()[:1] == code


@given(body=st.binary(max_size=64))
def test_startup_fuzz(body: bytes) -> None:
    try:
        m.decode_startup(body)
    except ProtocolViolation:
        pass


@given(stream=st.binary(max_size=300), cut=st.integers(0, 300))
def test_frame_decoder_fuzz(stream: bytes, cut: int) -> None:
    """Property: feeding a stream in two pieces yields the same frames or the same error."""

    def run(chunks: list[bytes]) -> tuple[list[object], bool]:
        d = FrameDecoder(max_message_size=128)
        out: list[object] = []
        try:
            for c in chunks:
                d.feed(c)
                while (f := d.next()) is not None:
                    out.append(f)
                    d.startup = False
                    if f.code:
                        try:
                            out.append(m.decode_frontend(f.code, f.body))
                        except ProtocolViolation:
                            out.append("bad")
        except ProtocolViolation:
            return out, True
        return out, False

    assert run([stream]) == run([stream[:cut], stream[cut:]])
