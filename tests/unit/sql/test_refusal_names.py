"""Refusals name the user's own syntax, never sqlglot's internal names (dpsql/sql/names.py).

sqlglot parses ``to_date`` into ``StrToDate`` (``str_to_date()``), ``now()`` into
``CurrentTimestamp``, ``x ~ 'a'`` into ``RegexpLike``; a message built from those would name
things the user never wrote. Each statement below is refused; every function-call name in the
message must occur in the statement, and no sqlglot class name may appear at all.
"""

from __future__ import annotations

import re

import pytest
import sqlglot
from sqlglot import exp

from dpsql.demo import POLICY
from dpsql.errors import DpsqlError
from dpsql.policy import load_policy
from dpsql.sql.analyze import analyze
from dpsql.sql.parse import parse_statement

policy = load_policy(POLICY)

REFUSED = [
    "SELECT COUNT(*) FROM purchases WHERE purchased_at >= TO_DATE('2025-02-30', 'YYYY-MM-DD')",
    "SELECT COUNT(*) FROM purchases WHERE purchased_at >= to_date('1/02/2025', 'MM/DD/YYYY')",
    "SELECT COUNT(*) FROM purchases WHERE purchased_at >= to_date('02 Jan 2025', 'DD Mon YYYY')",
    "SELECT COUNT(*) FROM purchases WHERE purchased_at >= TO_TIMESTAMP('2025', 'YYYY')",
    "SELECT COUNT(*) FROM purchases WHERE purchased_at >= to_timestamp(99999999999999)",
    "SELECT COUNT(*) FROM purchases WHERE purchased_at >= to_timestamp(quantity)",
    "SELECT COUNT(*) FROM purchases WHERE category ~ 'b.*'",
    "SELECT COUNT(*) FROM purchases WHERE category SIMILAR TO 'b%'",
    "SELECT COUNT(*) FROM purchases WHERE regexp_replace(category, 'b', 'c') = 'x'",
    "SELECT COUNT(*) FROM purchases WHERE md5(category) = 'x'",
    "SELECT COUNT(*) FROM purchases WHERE category::regtype IS NULL",
    "SELECT COUNT(*) FROM purchases WHERE CAST(category AS integer) = 1",
    "SELECT COUNT(*) FROM purchases WHERE category COLLATE \"C\" = 'b'",
    "SELECT COUNT(*) FROM purchases WHERE quantity # 1 = 0",
    "SELECT COUNT(*) FROM purchases WHERE clock_timestamp() > purchased_at",
    "SELECT COUNT(*) FROM purchases WHERE purchased_at > make_date(2025, 1, 1)",
    "SELECT COUNT(*) FROM purchases WHERE date_part('year', category) = 2025",
    "SELECT COUNT(*) FROM purchases WHERE purchased_at AT TIME ZONE 'UTC' > now()",
    "SELECT COUNT(*) FROM purchases WHERE purchased_at > now() - INTERVAL '500 years'",
    "SELECT string_agg(category, ',') FROM purchases",
    "SELECT COUNT(*), json_build_object('a', 1) FROM purchases",
    "SELECT COUNT(*) FROM purchases GROUP BY to_char(amount, '999')",
    "SELECT COUNT(*) FROM purchases WHERE left(category, 1) = 'b'",
    "SELECT width_bucket(amount, 0, 500, 0), COUNT(*) FROM purchases GROUP BY 1",
    "SELECT width_bucket(amount, 5, 5, 10), COUNT(*) FROM purchases GROUP BY 1",
    "SELECT width_bucket(amount, quantity, 500, 10), COUNT(*) FROM purchases GROUP BY 1",
    "SELECT width_bucket(amount, ARRAY[1, 2]), COUNT(*) FROM purchases GROUP BY 1",
    "SELECT COUNT(*) FROM pums WHERE width_bucket(age::float8, 0, 100, 10) = 3",
    "SELECT COUNT(*) FROM purchases WHERE category IN (SELECT category FROM purchases)",
]

_CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\(")
_CLASS_NAMES = {
    cls.__name__.lower()
    for cls in vars(exp).values()
    if isinstance(cls, type)
    and issubclass(cls, exp.Expression)
    and re.search("[a-z][A-Z]", cls.__name__)
}  # fmt: skip  (CamelCase names: StrToDate, CurrentTimestamp, RegexpLike; not CTE or Column)


def names_leaked(sql: str, err: DpsqlError) -> set[str]:
    """Names in a refusal that the statement doesn't contain: calls ``f(`` and sqlglot classes."""
    text = " ".join(str(x) for x in (err.message, err.detail) if x)
    allowed = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", sql)}
    called = {m.lower() for m in _CALL.findall(text)} - allowed
    words = {
        w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text + " " + (err.hint or ""))
    }
    return called | {w for w in words & _CLASS_NAMES if w not in allowed}


def refusal(sql: str) -> DpsqlError:
    with pytest.raises(DpsqlError) as info:
        st = parse_statement(sql)
        assert st.tree is not None
        analyze(st.tree, policy)
    return info.value


@pytest.mark.parametrize("sql", REFUSED)
def test_message_names_only_the_users_syntax(sql: str) -> None:
    err = refusal(sql)
    assert not names_leaked(sql, err), (err.message, names_leaked(sql, err))
    assert "str_to_date" not in err.message and "currenttimestamp" not in err.message.lower()


def test_superset_time_range_filter_is_answered_not_refused() -> None:
    sql = ("SELECT category, COUNT(*) FROM purchases WHERE category IN ('books', 'travel') "
           "AND purchased_at >= TO_DATE('2025-03-01', 'YYYY-MM-DD') "
           "AND purchased_at < TO_DATE('2025-07-01', 'YYYY-MM-DD') GROUP BY category")  # fmt: skip
    st = parse_statement(sql)
    assert st.tree is not None
    a = analyze(st.tree, policy)
    assert a.group_keys[0].keys == ("books", "travel")


def test_the_check_catches_sqlglot_names() -> None:
    """The test above would fail on the old message (a broken twin of dpsql.sql.names)."""
    old = "function str_to_date() is not supported in WHERE of a private query"
    sql = REFUSED[0]
    called = {m.lower() for m in _CALL.findall(old)}
    assert not called <= {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", sql)}
    assert "strtodate" in _CLASS_NAMES or "str_to_date" in called
    assert sqlglot.parse_one("to_date('x', 'YYYY')", read="postgres").sql_name() == "STR_TO_DATE"


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("SELECT COUNT(*) FROM purchases WHERE amount::numeric[] IS NULL", "numeric[]"),
        ("SELECT COUNT(*) FROM purchases WHERE category::numeric(4, 1) > 1", "numeric(4, 1)"),
    ],
)
def test_a_cast_names_the_type_as_postgresql_spells_it(sql: str, want: str) -> None:
    """sqlglot spells ``numeric`` as ``DECIMAL``: refusals say ``numeric`` (dpsql.sql.names.type_sql)."""
    err = refusal(sql)
    assert want in err.message and "decimal" not in err.message.lower(), err.message
