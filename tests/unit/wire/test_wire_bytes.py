"""The bytes of every protocol message dpsql reads or writes, pinned as they were before the
message classes were declared by layout (73c99c3, issue 18: main 6cfcc09's encodings, taken
from that tree). The round-trip tests (test_wire_messages) cannot see a change that alters
encode and decode alike (a field order, a width, a terminator); these can: a client or server
reads the bytes, not our decoder."""

from __future__ import annotations

import pytest

from dpsql.wire import messages as m
from dpsql.wire.messages._base import KeyData, Message, Opaque

CASES = [
    (m.AuthenticationCleartextPassword(), "520000000800000003"),
    (m.AuthenticationMD5Password(salt=b"abcd"), "520000000c0000000561626364"),
    (m.AuthenticationMD5Password(salt=b"\x00\xff\x01\x02"), "520000000c0000000500ff0102"),
    (m.AuthenticationOk(), "520000000800000000"),
    (m.AuthenticationSASL(mechanisms=("a", "bc")), "520000000e0000000a610062630000"),
    (m.AuthenticationSASLContinue(data=b"\x01\x02"), "520000000a0000000b0102"),
    (m.AuthenticationSASLFinal(data=b"\x01\x02"), "520000000a0000000c0102"),
    (m.BackendKeyData(process_id=3, secret_key=3), "4b0000000c0000000300000003"),
    (m.BackendKeyData(process_id=4, secret_key=4), "4b0000000c0000000400000004"),
    (m.BindComplete(), "3200000004"),
    (m.CloseComplete(), "3300000004"),
    (m.CommandComplete(tag="ab"), "4300000007616200"),
    (m.CommandComplete(tag="x"), "43000000067800"),
    (m.DataRow(values=(None, b"z")), "440000000f0002ffffffff000000017a"),
    (m.EmptyQueryResponse(), "4900000004"),
    (
        m.ErrorResponse(fields={"S": "ERROR", "C": "42501", "M": "no"}),
        "4500000017534552524f5200433432353031004d6e6f0000",
    ),
    (m.ErrorResponse(fields={}), "450000000500"),
    (
        m.NegotiateProtocolVersion(newest_minor=3, unsupported=("a", "bc")),
        "760000001100000003000000026100626300",
    ),
    (
        m.NegotiateProtocolVersion(newest_minor=4, unsupported=("a", "bc")),
        "760000001100000004000000026100626300",
    ),
    (m.NoData(), "6e00000004"),
    (m.NoticeResponse(fields={"S": "NOTICE", "M": "hi"}), "4e00000011534e4f54494345004d68690000"),
    (m.NoticeResponse(fields={"V": "x"}), "4e0000000856780000"),
    (m.ParameterDescription(type_oids=(1, 2)), "740000000e00020000000100000002"),
    (m.ParameterStatus(name="ab", value="ab"), "530000000a616200616200"),
    (m.ParameterStatus(name="x", value="x"), "530000000878007800"),
    (m.ParseComplete(), "3100000004"),
    (m.PortalSuspended(), "7300000004"),
    (m.ReadyForQuery(status="I"), "5a0000000549"),
    (m.ReadyForQuery(status="T"), "5a0000000554"),
    (
        m.RowDescription(
            fields=(
                m.FieldDescription(
                    name="a",
                    type_oid=23,
                    typmod=-1,
                    type_size=4,
                    format=0,
                    table_oid=0,
                    column_number=0,
                ),
                m.FieldDescription(
                    name="b",
                    type_oid=1700,
                    typmod=655366,
                    type_size=-1,
                    format=1,
                    table_oid=16384,
                    column_number=2,
                ),
            )
        ),
        "540000002e00026100000000000000000000170004ffffffff00006200000040000002000006a4ffff000a00060001",
    ),
    (m.RowDescription(fields=()), "54000000060000"),
    (
        m.Bind(
            portal="ab",
            statement="ab",
            param_formats=(0, 1),
            params=(None, b"z"),
            result_formats=(1,),
        ),
        "420000001f6162006162000002000000010002ffffffff000000017a00010001",
    ),
    (
        m.Bind(portal="x", statement="x", param_formats=(), params=(None, b"z"), result_formats=()),
        "42000000177800780000000002ffffffff000000017a0000",
    ),
    (m.CancelRequest(process_id=3, secret_key=3), "0000001004d2162e0000000300000003"),
    (m.CancelRequest(process_id=4, secret_key=4), "0000001004d2162e0000000400000004"),
    (m.Close(kind="S", name="ab"), "430000000853616200"),
    (m.Close(kind="P", name="x"), "4300000007507800"),
    (m.CopyData(data=b"\x01\x02"), "64000000060102"),
    (m.CopyDone(), "6300000004"),
    (m.CopyFail(message="ab"), "6600000007616200"),
    (m.CopyFail(message="x"), "66000000067800"),
    (m.Describe(kind="S", name="ab"), "440000000853616200"),
    (m.Describe(kind="P", name="x"), "4400000007507800"),
    (m.Execute(portal="ab", max_rows=3), "450000000b61620000000003"),
    (m.Execute(portal="x", max_rows=4), "450000000a780000000004"),
    (m.Flush(), "4800000004"),
    (m.FunctionCall(data=b"\x01\x02"), "46000000060102"),
    (m.GSSENCRequest(), "0000000804d21630"),
    (
        m.Parse(statement="ab", sql="ab", param_types=(1, 2)),
        "500000001461620061620000020000000100000002",
    ),
    (m.Parse(statement="x", sql="x", param_types=(1, 2)), "50000000127800780000020000000100000002"),
    (m.PasswordMessage(password="ab"), "7000000007616200"),
    (m.PasswordMessage(password="x"), "70000000067800"),
    (m.Query(sql="ab"), "5100000007616200"),
    (m.Query(sql="x"), "51000000067800"),
    (m.SASLInitialResponse(mechanism="ab", data=b"\x05"), "700000000c6162000000000105"),
    (m.SASLInitialResponse(mechanism="x", data=None), "700000000a7800ffffffff"),
    (m.SASLResponse(data=b"\x01\x02"), "70000000060102"),
    (m.SSLRequest(), "0000000804d2162f"),
    (
        m.StartupMessage(protocol=196608, parameters={"user": "u", "database": "d"}),
        "0000001b0003000075736572007500646174616261736500640000",
    ),
    (m.StartupMessage(protocol=196608, parameters={}), "000000090003000000"),
    (m.Sync(), "5300000004"),
    (m.Terminate(), "5800000004"),
    (m.Query(sql="SELECT 'é'"), "510000001053454c4543542027c3a92700"),
    (
        m.RowDescription(fields=(m.FieldDescription(name="é", type_oid=25),)),
        "540000001b0001c3a90000000000000000000019ffffffffffff0000",
    ),
    (
        m.StartupMessage(parameters={"user": "ana", "database": "db"}),
        "0000001e000300007573657200616e610064617461626173650064620000",
    ),
    (m.CancelRequest(process_id=7, secret_key=-99), "0000001004d2162e00000007ffffff9d"),
    (m.Bind(portal="", statement=""), "420000000c0000000000000000"),
]


@pytest.mark.parametrize(("msg", "wire"), CASES, ids=lambda x: type(x).__name__)
def test_message_bytes(msg: Message, wire: str) -> None:
    """Each message encodes to the bytes main 6cfcc09 wrote, and those bytes decode to it."""
    got = msg.encode()
    assert got.hex() == wire
    body = got[len(msg.code) + 4 :]
    assert type(msg).decode(body) == msg


def test_every_message_class_is_pinned() -> None:
    """A message class added later gets its bytes pinned here too."""
    pinned = {type(msg).__name__ for msg, _ in CASES}

    def classes(c: type[Message]) -> set[type[Message]]:
        subs = set(c.__subclasses__())
        return subs.union(*(classes(s) for s in subs))

    concrete = {c.__name__ for c in classes(Message) if not c.__name__.startswith("_")}
    assert concrete - {Opaque.__name__, KeyData.__name__} - pinned == set()
