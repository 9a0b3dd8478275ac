"""The ``options`` startup parameter (libpq's ``options`` keyword and ``PGOPTIONS``), read as
PostgreSQL reads it: words split at unescaped whitespace (a backslash escapes the next
character), each ``-c name=value``, ``-cname=value`` or ``--name=value`` (dashes in the name are
underscores). Other backend switches are refused: dpsql has no backend to pass them to.

>>> parse_options(r"-c dpsql.epsilon=0.5 --application-name=my\\ tool -cTimeZone=UTC")
(('dpsql.epsilon', '0.5'), ('application_name', 'my tool'), ('TimeZone', 'UTC'))
"""

from __future__ import annotations

from dpsql.errors import InvalidParameter


def split_words(text: str) -> list[str]:
    """PostgreSQL's ``pg_split_opts``: whitespace separates, a backslash escapes."""
    words: list[str] = []
    cur: list[str] = []
    escaped = in_word = False
    for ch in text:
        if escaped:
            cur.append(ch)
            escaped, in_word = False, True
        elif ch == "\\":
            escaped = in_word = True
        elif ch.isspace():
            if in_word:
                words.append("".join(cur))
                cur, in_word = [], False
        else:
            cur.append(ch)
            in_word = True
    if in_word:
        words.append("".join(cur))
    return words


def parse_options(text: str) -> tuple[tuple[str, str], ...]:
    """(name, value) pairs of an ``options`` string, in order.

    Raises:
        InvalidParameter: 22023, a switch other than ``-c`` / ``--name=value``, or no ``=``.
    """
    words = split_words(text)
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-c":
            i += 1
            if i == len(words):
                raise _bad(word)
            setting = words[i]
        elif word.startswith("-c"):
            setting = word[2:]
        elif word.startswith("--"):
            setting = word[2:]
        else:
            raise _bad(word)
        name, eq, value = setting.partition("=")
        if not eq or not name:
            raise _bad(setting)
        out.append((name.replace("-", "_"), value))
        i += 1
    return tuple(out)


def _bad(word: str) -> InvalidParameter:
    return InvalidParameter(
        f"invalid command-line argument for server process: {word}",
        hint='dpsql reads settings from options as -c name=value (e.g. PGOPTIONS="-c '
        'dpsql.epsilon=0.5")',
    )
