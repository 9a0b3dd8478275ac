"""The wire finds the query of ``COPY (query) TO STDOUT`` where PostgreSQL's own lexer ends it.

``dpsql.wire.copy_out`` had its own scanner for the closing parenthesis, which took only
``[A-Za-z_]`` for a dollar quote's tag and read comments without nesting: ``COPY (SELECT
$a1$)$a1$) TO STDOUT`` (a tag with a digit), ``$é$ ) $é$`` (a non-ASCII tag) and ``/* ) /* */ )
*/`` (a nested comment) were cut at a ``)`` inside the string or comment and refused 42601, where
PostgreSQL reads one statement. It now walks :func:`dpsql.sql.dollar_quotes.lexemes`, the one
scanner of PostgreSQL's lexemes that also checks every statement's dollar quotes. The oracle is
PostgreSQL's lexer itself (libpg_query's scanner through pglast).
"""

from __future__ import annotations

import pytest
from pglast.parser import ParseError, scan

from dpsql.sql.dollar_quotes import matching_paren
from dpsql.wire.copy_out import parse_copy

QUERIES = [
    "SELECT $a1$)$a1$",  # a tag with a digit
    "SELECT $é$ ) ( $é$",  # a non-ASCII tag
    "SELECT $_9$'$_9$, $$)$$",
    "SELECT 'x' /* ) /* ( */ ) */",  # nested comments
    "SELECT 1 -- )\n",
    'SELECT "a)b" FROM (SELECT 1 AS "a)b") s',
    "SELECT E'\\')', 'it''s )'",
    "SELECT 'a'\n  ')' AS continued",  # a string continued on the next line
    "SELECT a$$b FROM (SELECT 1 AS a$$b) s",  # $ inside a word: no dollar quote
    'SELECT U&"d\\0061)" FROM (SELECT 1 AS "da)") s',
    "SELECT $a$ $b$ ) $b$ $a$",  # nested tags are text
]
UNCLOSED = ["SELECT $a1$)", "SELECT /* ) /* */ )", "SELECT ')", "SELECT (1"]


def _postgresql_paren(text: str, i: int) -> int:
    """The ``)`` closing the ``(`` at ``i``, from PostgreSQL's lexer (pglast gives character
    offsets)."""
    depth = 0
    try:
        tokens = scan(text)
    except ParseError:
        return -1
    for tok in tokens:
        if tok.start < i or tok.name not in ("ASCII_40", "ASCII_41"):
            continue
        depth += 1 if tok.name == "ASCII_40" else -1
        if depth == 0:
            return int(tok.start)
    return -1


@pytest.mark.parametrize("query", QUERIES + UNCLOSED)
def test_closing_paren_is_postgresqls(query: str) -> None:
    text = f"COPY ({query}) TO STDOUT WITH (FORMAT csv)"
    want = _postgresql_paren(text, 5)
    assert matching_paren(text, 5) == want
    if query in QUERIES:
        assert want == len(text) - len(" TO STDOUT WITH (FORMAT csv)") - 1
        st = parse_copy(text)
        assert st is not None and st.query == query.strip() and st.csv


@pytest.mark.parametrize("query", UNCLOSED)
def test_unclosed_is_left_to_the_engine(query: str) -> None:
    # no closing parenthesis for PostgreSQL: not a COPY the wire answers (the engine's 42601)
    assert parse_copy(f"COPY ({query} TO STDOUT") is None
