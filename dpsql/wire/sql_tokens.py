"""The tokens of the few statements the wire reads itself, before the engine sees them: session
statements (:mod:`dpsql.wire.statements`: SET, SHOW, BEGIN ...) and ``COPY ... TO STDOUT``
(:mod:`dpsql.wire.copy_out`). Space and comments are dropped; strings and quoted names are read
as PostgreSQL reads them, words lower-cased; a trailing ``;`` is dropped.

>>> toks, stop = scan("SET search_path TO 'a''b', \\"My\\"; ")
>>> [(t.kind, t.text) for t in toks], stop
([('word', 'set'), ('word', 'search_path'), ('word', 'to'), ('str', "a'b"), ('punct', ','), ('qid', 'My')], 33)
>>> toks, stop = scan("SET x = E'it\\\\'s' :: y")
>>> [(t.text, t.escaped) for t in toks], stop
([('set', False), ('x', False), ('=', False), ("it's", True)], 17)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(
    r"""
    \s+ | --[^\n]* | /\*.*?\*/                      # space and comments (dropped)
    | (?P<str>'(?:[^']|'')*')                        # string literal
    | (?P<estr>[Ee]'(?:[^'\\]|''|\\.)*')             # escape string literal (E'...')
    | (?P<qid>"(?:[^"]|"")+")                        # quoted identifier
    | (?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
    | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
    | (?P<punct>[=,.;()*])
    """,
    re.VERBOSE | re.DOTALL,
)
# PostgreSQL's escapes in E'...' (its docs, 4.1.2.2): '' for ': \b \f \n \r \t, octal, hex, Unicode,
# and any other character taken as itself (\\, \')
_ESCAPED = re.compile(
    r"''|\\(?:([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))", re.DOTALL
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_SIMPLE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescape(m: re.Match[str]) -> str:
    octal, hexa, u4, u8, other = m.groups()
    if m.group(0) == "''":
        return "'"
    if other is not None:
        return _SIMPLE.get(other, other)
    if octal is not None:
        return chr(int(octal, 8))
    return chr(int(hexa or u4 or u8, 16))


@dataclass(frozen=True, slots=True)
class Tok:
    """A token: ``kind`` str, qid, num, word or punct; ``text`` as PostgreSQL reads it."""

    kind: str
    text: str
    escaped: bool = False  # a string written E'...' (its backslash escapes read)


def first_word(sql: str) -> str | None:
    """The first token of ``sql`` when it is a word (lower-cased), else None; read without
    reading the rest (every statement's first word is looked at, few are read further)."""
    m = _WORD.match(sql, skip_space(sql, 0))
    return m.group().lower() if m is not None else None


def scan(sql: str) -> tuple[list[Tok], int]:
    """The tokens of ``sql`` up to the first character that starts none (``$1``, ``::`` ...),
    and that character's index (``len(sql)`` when every character was read)."""
    out: list[Tok] = []
    pos, n = 0, len(sql)
    while pos < n:
        m = _TOKEN.match(sql, pos)
        if m is None:
            return out, pos
        pos = m.end()
        kind = m.lastgroup
        if kind is None:
            continue
        text = m.group(kind)
        if kind == "str":
            out.append(Tok(kind, text[1:-1].replace("''", "'")))
            continue
        if kind == "estr":
            out.append(Tok("str", _ESCAPED.sub(_unescape, text[2:-1]), True))
            continue
        if kind == "qid":
            text = text[1:-1].replace('""', '"')
        elif kind == "word":
            text = text.lower()
        out.append(Tok(kind, text))
    while out and out[-1].kind == "punct" and out[-1].text == ";":
        out.pop()
    return out, n


def skip_space(text: str, i: int) -> int:
    """The index of the first character from ``i`` on that is not space or in a comment."""
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif text.startswith("--", i):
            j = text.find("\n", i)
            i = len(text) if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = len(text) if j < 0 else j + 2
        else:
            break
    return i
