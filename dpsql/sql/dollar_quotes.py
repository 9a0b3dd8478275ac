"""Dollar-quoted strings read exactly where PostgreSQL reads them, or the statement refused.

A public statement runs upstream as written, and dpsql decides it is public from sqlglot's
reading of it: where sqlglot and PostgreSQL end a string at different places, PostgreSQL could
run code dpsql read as a string. For dollar quotes they differ: sqlglot takes any text between two
``$`` without a space for a tag (``$a-b$``, ``$'$``, ``$1a$``, where PostgreSQL sees a syntax
error), and a tag with a character Python calls a space (``$a\\u00a0b$``, a tag for PostgreSQL,
whose lexer reads every non-ASCII byte as a letter) is no tag for sqlglot. A private query's
SQL is written from sqlglot's tree, so there a misreading answers a statement PostgreSQL would
refuse, or with another constant.

:func:`check_dollar_quotes` scans the text as PostgreSQL's lexer does (``scan.l``: strings and
their continuation across a newline, ``E''`` escapes, quoted names, nested ``/* */`` comments,
words that take ``$`` as a letter, ``$n`` parameters, tags of ``[A-Za-z_]`` and non-ASCII
followed by those and digits) and compares the dollar quotes it finds with sqlglot's, by place
and body. The scan runs only when the text has a ``$``. The same scan (:func:`lexemes`) finds
where the query of ``COPY (query) TO STDOUT`` ends for the wire (:func:`matching_paren`): one
reading of PostgreSQL's lexemes, not two.

>>> from sqlglot.dialects.postgres import Postgres
>>> def check(text): check_dollar_quotes(text, list(Postgres().tokenize(text)))
>>> check("SELECT $t$x'; SELECT 1; --$t$, a$$b$$ FROM t WHERE c = $1")
>>> check("SELECT $a-b$x$a-b$")
Traceback (most recent call last):
...
dpsql.errors.SqlSyntaxError: syntax error at or near "$"
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from sqlglot.tokenizer_core import Token, TokenType

from dpsql.errors import FeatureNotSupported, SqlSyntaxError

_LETTER = "A-Za-z_\x80-\U0010ffff"
_SCAN = re.compile(
    rf"""
      (?P<space>[ \t\n\r\f\v]+)
    | (?P<line>--[^\n\r]*)
    | (?P<block>/\*)
    | (?P<estr>[eE]')
    | (?P<str>(?:[uU]&|[bBxXnN])?')
    | (?P<qid>(?:[uU]&)?"(?:[^"]|"")*")
    | (?P<dolq>\$(?:[{_LETTER}][{_LETTER}0-9]*)?\$)
    | (?P<param>\$[0-9]+)
    | (?P<word>[{_LETTER}][{_LETTER}0-9$]*)
    | (?P<num>[0-9][0-9_]*(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
# the body of a string from its opening quote on: E'' reads backslash escapes, the others do not
_BODY = {"estr": re.compile(r"(?:[^'\\]|''|\\.)*'", re.DOTALL), "str": re.compile(r"(?:[^']|'')*'")}
# a string goes on after a closing quote, space holding a newline (and comments), and a quote
_CONTINUE = re.compile(r"[ \t\f\v]*[\n\r](?:[ \t\n\r\f\v]+|--[^\n\r]*[\n\r])*'")


class _Unterminated(Exception):
    """PostgreSQL's lexer stops here: an unterminated string, comment or dollar quote."""


def _block_end(text: str, i: int) -> int:
    """The index after the ``*/`` closing the ``/*`` at ``i``, nesting as PostgreSQL does."""
    depth, n, i = 1, len(text), i + 2
    while i < n:
        if text.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif text[i] == "*":
            while i < n and text[i] == "*":
                i += 1
            if i < n and text[i] == "/":
                depth, i = depth - 1, i + 1
                if depth == 0:
                    return i
        else:
            i += 1
    raise _Unterminated


def _string_end(text: str, i: int, body: re.Pattern[str]) -> int:
    """The index after the string whose body starts at ``i`` (continued lines included)."""
    while True:
        m = body.match(text, i)
        if m is None:
            raise _Unterminated
        i = m.end()
        more = _CONTINUE.match(text, i)
        if more is None:
            return i
        i = more.end()


def lexemes(text: str, i: int = 0) -> Iterator[tuple[str, int, int]]:
    """PostgreSQL's lexemes of ``text`` from ``i`` on, as (kind, start, end): a string
    (``str``, ``estr``: its continuation lines included), a quoted name (``qid``), a comment
    (``line``, ``block``: nested ``/* */`` as one), a dollar-quoted string (``dolq``), a
    parameter, a word, a number, space, or one ``other`` character (``(``, ``)``, ``;`` ...).

    >>> [(k, t) for k, a, b in lexemes("f($a1$)$a1$, a$$b) -- )") if (t := "f($a1$)$a1$, a$$b) -- )"[a:b]).strip()]
    [('word', 'f'), ('other', '('), ('dolq', '$a1$)$a1$'), ('other', ','), ('word', 'a$$b'), ('other', ')'), ('line', '-- )')]

    Raises:
        _Unterminated: the text ends inside a string, a quoted name, a comment or a dollar quote.
    """
    n = len(text)
    while i < n:
        m = _SCAN.match(text, i)
        assert m is not None  # 'other' takes any character
        kind, start, i = m.lastgroup or "other", m.start(), m.end()
        if kind == "block":
            i = _block_end(text, start)
        elif kind in _BODY:
            i = _string_end(text, i, _BODY[kind])
        elif kind == "other" and m.group() == '"':
            raise _Unterminated
        elif kind == "dolq":
            close = text.find(m.group(), i)
            if close < 0:
                raise _Unterminated
            i = close + len(m.group())
        yield kind, start, i


def postgres_dollar_quotes(text: str) -> list[tuple[int, int, str]]:
    """Each dollar-quoted string PostgreSQL reads in ``text``: (index of its first ``$``, index
    of its last ``$``, body), in order.

    >>> postgres_dollar_quotes("SELECT $a$x$A$y$a$, 'it''s $$', a$$b$$ /* $$ /* */ $$ */ $é$z$é$")
    [(7, 17, 'x$A$y'), (57, 63, 'z')]

    Raises:
        _Unterminated: the text ends inside a string, a quoted name, a comment or a dollar quote.
    """
    out: list[tuple[int, int, str]] = []
    for kind, start, end in lexemes(text):
        if kind == "dolq":
            tag = _SCAN.match(text, start)
            assert tag is not None
            out.append((start, end - 1, text[tag.end() : end - len(tag.group())]))
    return out


def matching_paren(text: str, i: int) -> int:
    r"""The index of the ``)`` closing the ``(`` at ``i`` as PostgreSQL's lexer reads ``text``
    (strings, quoted names, dollar quotes and comments skipped); -1 when there is none or the
    text ends inside one of those.

    >>> matching_paren("COPY (SELECT $a1$)$a1$, ')', \"a)\" /* ) /* */ ) */) TO STDOUT", 5)
    49
    """
    depth = 0
    try:
        for kind, start, _end in lexemes(text, i):
            if kind == "other" and text[start] in "()":
                depth += 1 if text[start] == "(" else -1
                if depth == 0:
                    return start
    except _Unterminated:
        return -1
    return -1


def check_dollar_quotes(text: str, tokens: list[Token]) -> None:
    """Refuse ``text`` unless sqlglot's dollar-quoted strings (``tokens``) are PostgreSQL's.

    Raises:
        SqlSyntaxError: PostgreSQL would not read the text (42601): sqlglot read a dollar quote
            whose tag PostgreSQL does not take (``$a-b$``), or the text ends inside a string,
            comment or dollar quote for PostgreSQL.
        FeatureNotSupported: a dollar quote PostgreSQL reads where sqlglot reads none, or
            another (0A000).
    """
    if "$" not in text:
        return
    ours = [(t.start, t.end, t.text) for t in tokens if t.token_type == TokenType.HEREDOC_STRING]
    try:
        theirs = postgres_dollar_quotes(text)
    except _Unterminated:
        raise SqlSyntaxError(
            "unterminated quoted string, comment or dollar-quoted string",
            hint="close each string, quoted name, comment and $tag$ string",
        ) from None
    opaque = _commands(tokens, len(text))
    theirs = [q for q in theirs if not any(a <= q[0] < b for a, b in opaque)]
    if ours == theirs:
        return
    unread = sorted(set(ours) - set(theirs))
    if unread:
        start = unread[0][0]
        raise SqlSyntaxError(
            'syntax error at or near "$"',
            position=start + 1,
            detail="PostgreSQL reads no dollar-quoted string here: a tag is letters, digits and "
            "underscores, not starting with a digit",
            hint="write the constant as a standard string, e.g. 'books', or as $$books$$",
        )
    start = sorted(set(theirs) - set(ours))[0][0]
    raise FeatureNotSupported(
        "dpsql cannot read this dollar-quoted string as PostgreSQL does",
        position=start + 1,
        detail="its tag has a character dpsql's parser reads as a space",
        hint="write the constant as a standard string, e.g. 'books', or as $$books$$ or "
        "$tag$books$tag$ with an ASCII tag",
    )


def _commands(tokens: list[Token], end: int) -> list[tuple[int, int]]:
    """Where statements that begin with one of sqlglot's command words lie (``DO $$...$$``,
    ``EXPLAIN ...``: sqlglot reads the rest up to ``;`` as one string, no dollar quote of its
    own): from the word to the next ``;``. None of them runs upstream as written: DO, PREPARE,
    ... are refused by their word, EXPLAIN's statement is read (and checked) again on its own."""
    out: list[tuple[int, int]] = []
    start: int | None = None
    first = True
    for t in tokens:
        if t.token_type == TokenType.SEMICOLON:
            if start is not None:
                out.append((start, t.start))
            start, first = None, True
            continue
        if first and t.token_type == TokenType.COMMAND:
            start = t.start
        first = False
    if start is not None:
        out.append((start, end))
    return out
