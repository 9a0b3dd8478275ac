"""LineFormatter writes exactly the text of logging.Formatter(LINE_FORMAT), only cheaper.

Property: for any record (times across second boundaries and milliseconds 0..999, %-args,
exceptions, stack info, an explicit datefmt), both formatters give the same string, also when
one LineFormatter formats records of different seconds in any order (the cached second).
"""

from __future__ import annotations

import logging
import sys

import pytest

from dpsql.wire.log import LINE_FORMAT, LineFormatter

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
