"""No memo keeps a statement's text longer than dpsql.sql.prescan.MEMO_TEXT_MAX (64 KiB).

Statements may be up to 1 MiB (prescan). The memos keyed by a statement's text are bounded by
their number of entries (4,096 texts whose reading PostgreSQL's parser agreed with, 8,192 SQL
texts, 256 prepared statements per upstream connection), not by bytes: an analyst sending
thousands of distinct 1 MiB public statements (``SELECT '<1 MiB>' FROM regions``) made the
proxy hold gigabytes (the reading check alone held 199 MiB after 200 of them, 32 ms each). A
long text is worked out again each time instead (it is parsed each time anyway: the prepared
statement cache already skipped texts over 64 KiB).
"""

from __future__ import annotations

import gc
import tracemalloc
from collections import OrderedDict

import sqlglot

from dpsql.execute.caches import Memo
from dpsql.policy.tables import Column
from dpsql.sql.derived_memo import derived_domain
from dpsql.sql.parse import parse_statement
from dpsql.sql.prescan import MEMO_TEXT_MAX
from dpsql.wire.upstream_conn import UpstreamConn

LONG = MEMO_TEXT_MAX + 1


def _text(i: int, size: int) -> str:
    head = f"SELECT '{i}:"
    tail = "' AS s FROM regions"
    return head + "a" * (size - len(head) - len(tail)) + tail


def test_reading_long_texts_keeps_none_of_them() -> None:
    parse_statement(_text(0, 2 * LONG))  # imports, first-use caches
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(1, 11):
            assert len(_text(i, 2 * LONG)) == 2 * LONG
            parse_statement(_text(i, 2 * LONG))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 2 * LONG, held  # ten texts of 128 KiB read: not one kept (was ~1.3 MB)


def test_memos_keep_short_texts_only() -> None:
    m = Memo(8)
    m.remember(("sql", "x" * MEMO_TEXT_MAX, "analyst"), "short enough")
    m.remember(("sql", "y" * LONG, "analyst"), "too long")
    m.remember("z" * LONG, "too long")
    assert m.get(("sql", "x" * MEMO_TEXT_MAX, "analyst")) == "short enough"
    assert m.get(("sql", "y" * LONG, "analyst")) is None and m.get("z" * LONG) is None
    assert len(m) == 1


def test_upstream_prepares_no_long_text() -> None:
    conn = UpstreamConn.__new__(UpstreamConn)
    conn._seen, conn._columns, conn._closing = OrderedDict(), {}, []
    short, long = ("SELECT 1", (), "UTC"), ("SELECT '" + "a" * LONG + "'", (), "UTC")
    assert [conn._name(short), conn._name(short)][0] is None
    assert conn._name(short) is not None  # a short text is prepared from its second run
    assert [conn._name(long) for _ in range(3)] == [None, None, None]
    assert long not in conn._seen


def test_a_long_group_key_is_not_kept_by_the_domain_memo() -> None:
    """A GROUP BY key of thousands of literals (a 109 kB statement, CASE WHEN q IN (0, ...,
    19999)) was memoized under its tree's repr, 949 kB, up to 512 of them."""
    col = Column.model_construct(
        type="integer", bounds=(0, 100), keys=None, keys_from=None, identifier=False, nullable=True
    )
    lits = ", ".join(str(i) for i in range(20000))
    long = sqlglot.parse_one(f"CASE WHEN q IN ({lits}) THEN 'a' ELSE 'b' END", read="postgres")
    short = sqlglot.parse_one("CASE WHEN q IN (1, 2) THEN 'a' ELSE 'b' END", read="postgres")
    got = [derived_domain(e, lambda _: col, None, "UTC") for e in (long, long, short, short)]
    assert all(d is not None and d.keys == ("a", "b") for d in got)
    assert got[1] is not got[0] and got[3] is got[2]  # the long key worked out again
