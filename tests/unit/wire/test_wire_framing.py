"""Framing: lengths, limits, partial input, pipelined messages."""

from __future__ import annotations

import pytest

from dpsql.errors import ProtocolViolation
from dpsql.wire import messages as m
from dpsql.wire.framing import FrameDecoder


def test_pipelined_messages_arrive_byte_by_byte() -> None:
    stream = m.StartupMessage(parameters={"user": "a"}).encode()
    stream += m.Parse("", "SELECT 1").encode() + m.Bind("", "").encode() + m.Sync().encode()
    d = FrameDecoder()
    frames = []
    for i in range(len(stream)):
        d.feed(stream[i : i + 1])
        while (f := d.next()) is not None:
            frames.append(f)
            d.startup = False
    assert [f.code for f in frames] == [None, b"P", b"B", b"S"]
    assert d.buffered == 0


def test_oversized_length_is_refused_before_the_body_arrives() -> None:
    d = FrameDecoder(max_message_size=100)
    d.startup = False
    d.feed(b"Q\x00\x00\x00\x65")  # 101
    with pytest.raises(ProtocolViolation, match="limit is 100"):
        d.next()


@pytest.mark.parametrize("length", [0, 3])
def test_length_below_four_is_refused(length: int) -> None:
    d = FrameDecoder()
    d.startup = False
    d.feed(b"Q" + length.to_bytes(4, "big"))
    with pytest.raises(ProtocolViolation):
        d.next()


def test_startup_packet_limits() -> None:
    d = FrameDecoder()
    d.feed(b"\x00\x00\x00\x04")
    with pytest.raises(ProtocolViolation, match="startup packet"):
        d.next()
    d = FrameDecoder()
    d.feed((20_000).to_bytes(4, "big"))
    with pytest.raises(ProtocolViolation):
        d.next()


def test_garbage_before_startup_is_refused() -> None:
    d = FrameDecoder()
    d.feed(b"GET / HTTP/1.1\r\n")
    with pytest.raises(ProtocolViolation):
        d.next()
