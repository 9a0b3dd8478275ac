"""``SET dpsql.delta`` is checked when it is set, as PostgreSQL checks its own settings: a value
no private statement takes is refused at SET with PostgreSQL's words and the allowed range
(22023 ``0.5 is outside the valid range for parameter "dpsql.delta" (0 .. 0.01)``), and the
setting keeps its old value (was: SET accepted it, then every private statement was refused
with other words). No I/O."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpsql.errors import DpsqlError
from dpsql.session import SessionContext
from dpsql.wire.state import SessionState
from dpsql.wire.statements import parse_session_statement


def _set(state: SessionState, value: str) -> None:
    st = parse_session_statement(f"SET dpsql.delta = {value}")
    assert st is not None
    state.apply(st)


@pytest.mark.parametrize("value", ["0.5", "0.010001", "-1", "1"])
def test_out_of_range_refused_at_set(value: str) -> None:
    state = SessionState(SessionContext(analyst="ana"), {})
    _set(state, "1e-6")
    with pytest.raises(DpsqlError) as e:
        _set(state, value)
    shown = f"{float(value):g}"
    assert e.value.sqlstate == "22023"
    assert e.value.message == (
        f'{shown} is outside the valid range for parameter "dpsql.delta" (0 .. 0.01)'
    )
    assert e.value.hint
    assert state.ctx.delta == Fraction(1, 10**6)  # unchanged


@pytest.mark.parametrize(("value", "want"), [("0", Fraction(0)), ("0.01", Fraction(1, 100))])
def test_range_ends_taken(value: str, want: Fraction) -> None:
    state = SessionState(SessionContext(analyst="ana"), {})
    _set(state, value)
    assert state.ctx.delta == want
