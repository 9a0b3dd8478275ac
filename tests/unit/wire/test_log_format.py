"""LineFormatter writes exactly the text of logging.Formatter(LINE_FORMAT), only cheaper.

Property: the statement's JSON (an encoder built once) is JSONEncoder.encode's text.
Property: for any record (times across second boundaries and milliseconds 0..999, %-args,
exceptions, stack info, an explicit datefmt), both formatters give the same string, also when
one LineFormatter formats records of different seconds in any order (the cached second).
"""

from __future__ import annotations

import json
import logging
import sys

import pytest

from dpsql.wire.log import LINE_FORMAT, LineFormatter, _encode

TIMES = [0.0, 0.0009, 0.999, 0.9995, 1.0, 1.5, 59.999, 60.0, 1_700_000_000.123,
         1_700_000_000.9999, 1_700_000_001.0, 1_700_000_000.5, 1_800_000_123.456]  # fmt: skip


def _record(created: float, **kw: object) -> logging.LogRecord:
    rec = logging.LogRecord("dpsql.statement", logging.INFO, __file__, 1, '{"a":1}', None, None)
    rec.created = created
    rec.msecs = int((created - int(created)) * 1000) + 0.0
    rec.__dict__.update(kw)
    return rec


def test_same_text_as_the_standard_formatter() -> None:
    fast, std = LineFormatter(), logging.Formatter(LINE_FORMAT)
    for created in TIMES + TIMES[::-1]:
        rec = _record(created)
        assert fast.format(rec) == std.format(_record(created))
        assert rec.message == '{"a":1}' and rec.asctime == std.formatTime(rec)
    rec = _record(5.25, msg="x=%s %d", args=("y", 3), levelname="WARNING", name="dpsql.serve")
    assert fast.format(rec) == std.format(rec) and fast.format(rec).endswith("dpsql.serve x=y 3")
    assert fast.formatTime(rec, "%H:%M") == std.formatTime(rec, "%H:%M")


@pytest.mark.parametrize("extra", ["exc", "stack"])
def test_exceptions_and_stacks_take_the_standard_path(extra: str) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        info = sys.exc_info()
    kw = {"exc_info": info} if extra == "exc" else {"stack_info": "Stack (most recent call last)"}
    got = LineFormatter().format(_record(7.5, **kw))
    assert got == logging.Formatter(LINE_FORMAT).format(_record(7.5, **kw))
    assert ("ValueError: boom" if extra == "exc" else "Stack (most recent") in got


def test_statement_json_is_the_standard_encoding() -> None:
    odd = object()
    for fields in (
        {"analyst": "ana", "session": 7, "epsilon": 0.1, "delta": 1e-06, "cached": False},
        {"s": 'é"\\\n\x00', "n": None, "t": True, "big": 10**30, "f": -0.0},
        {"nan": float("nan"), "inf": float("inf"), "ninf": float("-inf")},
        {"tuple": (1, "a"), "nested": {"k": [1.5, None]}, "obj": odd},
        {},
    ):
        assert _encode(fields) == json.dumps(fields, default=str, separators=(",", ":")), fields
