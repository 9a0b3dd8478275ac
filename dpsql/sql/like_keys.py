"""PostgreSQL's ``LIKE`` / ``ILIKE`` of a known text against a constant pattern, decided exactly
or not at all, so a WHERE clause's pattern narrows a GROUP BY key's declared domain as ``=`` and
``IN`` do (:mod:`dpsql.sql.key_truth`): ``WHERE diagnosis LIKE 'f%' GROUP BY diagnosis`` releases
``flu`` and ``fracture`` only, not a noisy phantom row for each other key (newcomer22 #25).

PostgreSQL's rules (src/backend/utils/adt/like.c, like_match.c): ``_`` matches one character,
``%`` any run of characters (newlines too), the escape character (backslash unless ``ESCAPE``
says otherwise; ``ESCAPE ''`` turns escaping off) makes the next character literal; a pattern
ending in the escape character is an error (left undecided: PostgreSQL raises it). Characters
are compared as code points: LIKE under a deterministic collation (the only kind PostgreSQL 15
allows with LIKE; a released text key over a table with a nondeterministic collation or citext
is refused anyway: :func:`dpsql.execute.private._check_keys`). A ``character(n)`` value is
matched with its padding, which its printed key lacks: decided only when the padding can't
change the answer (``'f%'``, ``'%flu%'``; not ``'ab_'``, nor ``'%u'`` for ``flu``).

``ILIKE`` lower-cases both sides by the collation's rules, which dpsql doesn't know: decided only
when both texts are ASCII and the answer is the same under the common rules and the Turkish ones
(``I`` lower-cases to dotless ``ı`` there), else left undecided. Undecided means the key is kept,
as before: never a wrong narrowing, at worst a phantom group.
"""

from __future__ import annotations

import functools
import re

_TURKISH = str.maketrans({"I": "\u0131"})


@functools.lru_cache(maxsize=256)
def _regex(pattern: str, escape: str, fold: bool, turkish: bool) -> re.Pattern[str] | None:
    """``pattern`` as an anchored regular expression, None when PostgreSQL would refuse it (a
    trailing escape character, an escape string longer than one character)."""
    if len(escape) > 1:
        return None
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if escape and c == escape:
            if i + 1 == len(pattern):
                return None
            out.append(re.escape(_lower(pattern[i + 1], fold, turkish)))
            i += 2
            continue
        if c == "%":
            out.append(".*")
        elif c == "_":
            out.append(".")
        else:
            out.append(re.escape(_lower(c, fold, turkish)))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _lower(text: str, fold: bool, turkish: bool) -> str:
    if not fold:
        return text
    return (text.translate(_TURKISH) if turkish else text).lower()


MAX_PATTERN = 200
"""Longer patterns are left undecided (each is tried against the text with up to its length in
trailing spaces)."""


def like_match(text: str, pattern: str, escape: str = "\\", fold: bool = False) -> bool | None:
    """Whether ``text LIKE pattern ESCAPE escape`` (``fold``: ``ILIKE``) is true in
    PostgreSQL, None when that can't be decided exactly here.

    ``text`` is a key as PostgreSQL prints it, which for a ``character(n)`` column is the value
    without the trailing spaces LIKE sees (``'ab'::char(3) LIKE 'ab_'`` is true): the answer
    must be the same with any number of trailing spaces, else it is None.

    >>> like_match("fracture", "f%"), like_match("checkup", "f%"), like_match("f_x", "f\\\\_%")
    (True, False, True)
    >>> like_match("flu", "F%", fold=True), like_match("Iris", "i%", fold=True)
    (True, None)
    >>> like_match("ab", "ab_"), like_match("chemo", "%u"), like_match("flu", "%u")
    (None, False, None)
    """
    if len(pattern) > MAX_PATTERN or len(escape) > 1:
        return None
    if fold and not (text.isascii() and pattern.isascii() and escape.isascii()):
        return None
    answers = set()
    for turkish in (False, True) if fold else (False,):
        rx = _regex(pattern, escape, fold, turkish)
        if rx is None:
            return None
        low = _lower(text, fold, turkish)
        # past len(pattern) + 1 spaces the answer no longer changes
        answers |= {rx.fullmatch(low + " " * k) is not None for k in range(len(pattern) + 2)}
        if len(answers) > 1:
            return None
    return answers.pop()
