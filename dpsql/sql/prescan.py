"""Limits checked on a statement's text before it is tokenized or parsed (SQLSTATE 54000/54001).

Parsing costs time and memory in proportion to a statement's size, and sqlglot's parser recurses
once per nesting level: a 2 MB ``SELECT 1+1+...`` took tens of seconds and a gigabyte to parse,
and 5,000 nested parentheses exhausted Python's stack (an internal error with a 10,000-line
traceback). :func:`prescan` bounds all of that before any real work, with one cheap regular
expression pass that stops as soon as a limit is crossed:

* at most :data:`MAX_STATEMENT_LENGTH` characters (54000, checked without reading the text);
* at most :data:`MAX_STATEMENT_TOKENS` tokens (54001);
* parentheses and brackets nested at most :data:`MAX_NESTING_DEPTH` levels deep (54001).

The scan knows quotes, dollar quotes and comments, so a long string literal is one token and a
parenthesis inside it counts for nothing. It errs only on the side of counting more (a nested
block comment ends early, an unterminated quote is scanned as code); the parser then reports the
syntax error. The limits are far above hand-written and BI-generated SQL (the 122 statements of
the BI corpus have at most a few thousand tokens and 12 levels) and apply to every statement,
public and private alike.

>>> prescan("SELECT count(*) FROM t WHERE a IN (1, 2, 3)")
>>> prescan("SELECT " + "(" * 500 + "1" + ")" * 500)
Traceback (most recent call last):
...
dpsql.errors.StatementTooComplex: statement too complex: parentheses nested more than 100 levels deep
>>> prescan("SELECT ')))((('")
"""

from __future__ import annotations

import re

from dpsql.errors import ProgramLimitExceeded, StatementTooComplex

MAX_STATEMENT_LENGTH = 1 << 20  # characters (1 MiB of ASCII)
MAX_STATEMENT_TOKENS = 50_000  # sqlglot parses this many in about half a second
MAX_NESTING_DEPTH = 100  # sqlglot's parser recursion fails near 300 levels
MEMO_TEXT_MAX = 64 * 1024
"""The longest text (characters) any memo keeps: a statement's reading, its prepared form, its
SQL, an upstream prepared statement. Longer ones (up to :data:`MAX_STATEMENT_LENGTH`) are worked
out each time: thousands of distinct 1 MiB texts would otherwise stay held by memos bounded by
their number of entries (the reading check's alone held 199 MiB after 200 such statements)."""


def kept_text(text: str) -> bool:
    """Whether a memo may keep ``text`` (:data:`MEMO_TEXT_MAX`)."""
    return len(text) <= MEMO_TEXT_MAX


_TOKEN = re.compile(
    r"""
      [eE]'(?:[^'\\]|\\.|'')*+'        # escape string
    | '(?:[^']|'')*+'                  # string
    | "(?:[^"]|"")*+"                  # quoted identifier
    | \$(?P<tag>[A-Za-z_][A-Za-z_0-9]*)?\$.*?\$(?P=tag)\$   # dollar-quoted string
    | --[^\n]*+                        # line comment
    | /\*.*?\*/                        # block comment
    | [A-Za-z_\x80-\U0010ffff][A-Za-z_0-9$\x80-\U0010ffff]*+   # word
    | [0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?   # number
    | [(\[]                            # opening
    | [)\]]                            # closing
    | [^\s]                            # anything else, one character at a time
    """,
    re.VERBOSE | re.DOTALL,
)

_HINT = "split the statement into smaller ones, or move parts of it into views"


def prescan(
    text: str,
    *,
    max_length: int = MAX_STATEMENT_LENGTH,
    max_tokens: int = MAX_STATEMENT_TOKENS,
    max_depth: int = MAX_NESTING_DEPTH,
) -> None:
    """Refuse ``text`` if it is longer, has more tokens or nests deeper than the limits.

    The work is bounded by the limits, not by the text: the scan stops at the first token over
    ``max_tokens`` (a few milliseconds), and a text over ``max_length`` is refused unread.

    Raises:
        ProgramLimitExceeded: the text is longer than ``max_length`` characters (54000).
        StatementTooComplex: too many tokens or too deep a nesting (54001).
    """
    if len(text) > max_length:
        raise ProgramLimitExceeded(
            f"statement too long: {len(text)} characters, the limit is {max_length}",
            hint=_HINT,
        )
    tokens = depth = 0
    for m in _TOKEN.finditer(text):
        tokens += 1
        if tokens > max_tokens:
            raise StatementTooComplex(
                f"statement too complex: more than {max_tokens} tokens", hint=_HINT
            )
        c = text[m.start()]
        if c == "(" or c == "[":
            depth += 1
            if depth > max_depth:
                raise StatementTooComplex(
                    f"statement too complex: parentheses nested more than {max_depth} levels deep",
                    hint=_HINT,
                    position=m.start() + 1,
                )
        elif c == ")" or c == "]":
            depth -= 1


def too_complex(err: RecursionError) -> StatementTooComplex:
    """The refusal for a statement whose processing exhausted Python's stack (a nesting that
    :func:`prescan` does not count, e.g. thousands of chained ``NOT`` or ``CASE``)."""
    del err  # no traceback: the statement's shape, not a bug
    return StatementTooComplex("statement too complex: nested too deeply", hint=_HINT)
