"""The cursor statements' grammar and PostgreSQL's cursor positions (dpsql.wire.cursors)."""

from __future__ import annotations

import doctest

import pytest

from dpsql.errors import SqlSyntaxError
from dpsql.wire import cursors
from dpsql.wire.cursors import CursorStatement, move, parse_cursor_statement


def test_doctests() -> None:
    assert doctest.testmod(cursors).failed == 0


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("FETCH c", ("fetch", "c", "forward", 1)),
        ("fetch next from c;", ("fetch", "c", "forward", 1)),
        ("FETCH 5 IN c", ("fetch", "c", "forward", 5)),
        ("FETCH -2 FROM c", ("fetch", "c", "backward", 2)),
        ("FETCH ALL c", ("fetch", "c", "forward", None)),
        ("FETCH FORWARD ALL FROM c", ("fetch", "c", "forward", None)),
        ("FETCH BACKWARD FROM c", ("fetch", "c", "backward", 1)),
        ("FETCH PRIOR FROM c", ("fetch", "c", "backward", 1)),
        ("FETCH FIRST FROM c", ("fetch", "c", "absolute", 1)),
        ("FETCH LAST FROM c", ("fetch", "c", "absolute", -1)),
        ("FETCH ABSOLUTE -3 FROM c", ("fetch", "c", "absolute", -3)),
        ("FETCH RELATIVE 0 FROM c", ("fetch", "c", "relative", 0)),
        ("FETCH 0 FROM c", ("fetch", "c", "relative", 0)),
        ('MOVE FORWARD 3 FROM "My Cursor"', ("move", "My Cursor", "forward", 3)),
        ("CLOSE c", ("close", "c", "forward", 1)),
        ("CLOSE ALL", ("close", None, "forward", 1)),
    ],
)
def test_fetch_forms(sql: str, want: tuple[object, ...]) -> None:
    st = parse_cursor_statement(sql)
    assert st is not None
    assert (st.kind, st.name, st.direction, st.count) == want


def test_declare_forms() -> None:
    st = parse_cursor_statement(
        "DECLARE c BINARY INSENSITIVE SCROLL CURSOR WITHOUT HOLD FOR (SELECT 1);"
    )
    assert st == CursorStatement("declare", "c", "(SELECT 1)", False, True, True)
    assert parse_cursor_statement("SELECT 1") is None
    assert parse_cursor_statement("DELETE FROM t") is None
    for bad in ("DECLARE c FOR SELECT 1", "DECLARE c CURSOR FOR SHOW ALL", "FETCH 1 FROM"):
        with pytest.raises(SqlSyntaxError):
            parse_cursor_statement(bad)


def _walk(n: int, steps: list[tuple[str, int | None]]) -> list[list[int]]:
    pos, out = 0, []
    for direction, count in steps:
        rows, pos = move(pos, n, direction, count)  # type: ignore[arg-type]
        out.append(rows)
    return out


def test_positions_as_postgresql() -> None:
    """A few sequences (tests/integration/wire/test_cursor_positions.py checks them on PostgreSQL)."""
    assert _walk(5, [("forward", 2), ("forward", 2), ("forward", 2), ("forward", 1)]) == [
        [0, 1], [2, 3], [4], [],
    ]  # fmt: skip
    assert _walk(5, [("forward", None), ("backward", 2), ("relative", 0), ("backward", None)]) == [
        [0, 1, 2, 3, 4], [4, 3], [3], [2, 1, 0],
    ]  # fmt: skip
    assert _walk(5, [("absolute", -1), ("absolute", 9), ("relative", -1), ("absolute", 0)]) == [
        [4], [], [4], [],
    ]  # fmt: skip
    assert _walk(0, [("forward", 1), ("backward", 1), ("absolute", 1)]) == [[], [], []]
