"""Recognising the session statements the wire session answers itself (SET, SHOW, BEGIN, ...).

These never reach the engine or PostgreSQL: they change per-session state only. A statement that is
not one of them returns None and goes to the engine. The grammar is PostgreSQL's, reduced to what
clients send; anything malformed inside a recognised statement is a 42601 syntax error.

>>> parse_session_statement("SET dpsql.epsilon = 0.5;")
SessionStatement(kind='set', name='dpsql.epsilon', value='0.5', local=False)
>>> parse_session_statement("rollback to savepoint sa_1").kind
'rollback_to'
>>> parse_session_statement("SELECT 1") is None
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dpsql.errors import PrivacyViolation, SqlSyntaxError
from dpsql.wire.sql_tokens import Tok, first_word, scan

_FIRST_WORDS = frozenset(
    "set reset show begin start commit end rollback abort savepoint release discard deallocate "
    "unlisten".split()
)


SessionKind = Literal[
    "set", "reset", "show", "begin", "commit", "rollback", "rollback_to", "savepoint", "release",
    "discard", "deallocate", "noop",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class SessionStatement:
    """A parsed session statement.

    ``kind`` says which (:data:`SessionKind`: :meth:`dpsql.wire.state.SessionState.apply`
    matches on it). ``name`` is the setting / savepoint / statement name (lower-cased
    unless quoted), ``value`` the new setting value (None for DEFAULT).
    """

    kind: SessionKind
    name: str | None = None
    value: str | None = None
    local: bool = False


class _P:
    def __init__(self, toks: list[Tok], sql: str) -> None:
        self.t = toks
        self.i = 0
        self.sql = sql

    def peek(self) -> str | None:
        return (
            self.t[self.i].text if self.i < len(self.t) and self.t[self.i].kind != "str" else None
        )

    def accept(self, *words: str) -> str | None:
        w = self.peek()
        if w is not None and w in words:
            self.i += 1
            return w
        return None

    def done(self) -> bool:
        return self.i >= len(self.t)

    def error(self) -> SqlSyntaxError:
        near = self.t[self.i].text if self.i < len(self.t) else "end of input"
        return SqlSyntaxError(f'syntax error at or near "{near}"')

    def ident(self) -> str:
        if self.i >= len(self.t) or self.t[self.i].kind not in ("word", "qid"):
            raise self.error()
        self.i += 1
        return self.t[self.i - 1].text

    def dotted(self) -> str:
        name = self.ident()
        while self.accept("."):
            name += "." + self.ident()
        return name

    def end(self) -> None:
        if not self.done():
            raise self.error()

    def rest_words(self) -> None:
        self.i = len(self.t)


def parse_session_statement(sql: str) -> SessionStatement | None:
    """Parse ``sql`` (one statement) if it is a session statement, else None.

    Raises:
        SqlSyntaxError: a session statement with bad syntax.
        PrivacyViolation: SET ROLE / SET SESSION AUTHORIZATION.
    """
    if first_word(sql) not in _FIRST_WORDS:
        return None  # the rest is not read: every statement's text passes here
    toks, stop = scan(sql)
    if stop < len(sql) or any(t.escaped for t in toks):
        return None  # not read to its end, or an escape string: the engine's (and its errors)
    if any(t.kind == "punct" and t.text == ";" for t in toks):
        raise SqlSyntaxError(
            "cannot insert multiple commands into a prepared statement",
            hint="send one statement at a time",
        )
    p = _P(toks, sql)
    first = p.ident()
    parser = _PARSERS[first]
    return parser(p)


def _role_change() -> PrivacyViolation:
    return PrivacyViolation(
        "changing the role is not allowed through dpsql",
        hint="connect as the analyst you want to be",
    )


def _time_zone(p: _P) -> bool:
    """Whether the setting named next is ``TIME ZONE`` (PostgreSQL's spelling of ``timezone``)."""
    if not p.accept("time"):
        return False
    if not p.accept("zone"):
        raise p.error()
    return True


def _set(p: _P) -> SessionStatement:
    nxt = p.t[p.i + 1].text if p.i + 1 < len(p.t) else None
    if p.peek() == "session" and nxt == "characteristics":
        p.i += 2
        if not (p.accept("as") and p.accept("transaction")):
            raise p.error()
        level = _modes(p)
        if level is None:
            return SessionStatement("noop", name="SET")
        return SessionStatement("set", "default_transaction_isolation", level)
    if p.peek() == "role" or (p.peek() == "session" and nxt == "authorization"):
        raise _role_change()
    local = p.accept("local", "session") == "local"
    if p.peek() in ("role", "session_authorization"):
        raise _role_change()
    if p.accept("transaction"):
        if p.peek() == "snapshot":
            p.rest_words()
            return SessionStatement("noop", name="SET")
        level = _modes(p)
        if level is None:  # READ ONLY / DEFERRABLE: the proxy is read-only anyway
            return SessionStatement("noop", name="SET")
        return SessionStatement("set", "transaction_isolation", level, local)
    if _time_zone(p):
        name = "timezone"
        if p.accept("local"):  # SET TIME ZONE LOCAL: the default, as SET TIME ZONE DEFAULT
            p.end()
            return SessionStatement("set", name, None, local)
    elif p.peek() in ("names", "schema") and p.i + 1 < len(p.t) and p.t[p.i + 1].kind == "str":
        name = "client_encoding" if p.ident() == "names" else "search_path"
    else:
        name = p.dotted()
        if not p.accept("to", "="):
            raise p.error()
    value = _value(p)
    return SessionStatement("set", name, value, local)


def _value(p: _P) -> str | None:
    if p.accept("default"):
        p.end()
        return None
    parts: list[str] = []
    while True:
        if p.done():
            raise p.error()
        tok = p.t[p.i]
        p.i += 1
        if tok.kind == "punct":
            raise p.error()
        parts.append(tok.text)
        if not p.accept(","):
            break
    p.end()
    return ", ".join(parts)


def _reset(p: _P) -> SessionStatement:
    if p.accept("all"):
        p.end()
        return SessionStatement("reset", None)
    name = "timezone" if _time_zone(p) else p.dotted()
    p.end()
    return SessionStatement("reset", name)


def _show(p: _P) -> SessionStatement:
    if _time_zone(p):
        name = "timezone"
    elif p.accept("transaction"):
        if not (p.accept("isolation") and p.accept("level")):
            raise p.error()
        name = "transaction_isolation"
    else:
        name = p.dotted()
    p.end()
    return SessionStatement("show", name)


def _modes(p: _P) -> str | None:
    """The rest of the statement as PostgreSQL's transaction modes (``ISOLATION LEVEL ...``,
    ``READ ONLY`` / ``READ WRITE``, ``[NOT] DEFERRABLE``, optionally comma-separated): the
    isolation level named (lower case, ``read committed``), or None. The proxy is read-only
    whatever the access mode says (writes are refused as statements)."""
    level: str | None = None
    while not p.done():
        if p.accept("isolation"):
            if not p.accept("level"):
                raise p.error()
            if p.accept("serializable"):
                level = "serializable"
            elif p.accept("repeatable"):
                if not p.accept("read"):
                    raise p.error()
                level = "repeatable read"
            elif p.accept("read"):
                which = p.accept("committed", "uncommitted")
                if which is None:
                    raise p.error()
                level = f"read {which}"
            else:
                raise p.error()
        elif p.accept("read"):
            if p.accept("only", "write") is None:
                raise p.error()
        elif p.accept("not"):
            if not p.accept("deferrable"):
                raise p.error()
        elif not p.accept("deferrable"):
            raise p.error()
        p.accept(",")
    return level


def _begin(p: _P) -> SessionStatement:
    p.accept("work", "transaction")
    return SessionStatement("begin", value=_modes(p))


def _start(p: _P) -> SessionStatement:
    if not p.accept("transaction"):
        raise p.error()
    return SessionStatement("begin", value=_modes(p))


def _and_chain(p: _P) -> None:
    """The end of COMMIT / ROLLBACK: an optional ``AND [NO] CHAIN``."""
    if p.accept("and"):
        p.accept("no")
        if not p.accept("chain"):
            raise p.error()
    p.end()


def _commit(p: _P) -> SessionStatement:
    p.accept("work", "transaction")
    _and_chain(p)
    return SessionStatement("commit")


def _rollback(p: _P) -> SessionStatement:
    p.accept("work", "transaction")
    if p.accept("to"):
        p.accept("savepoint")
        return _named(p, "rollback_to")
    _and_chain(p)
    return SessionStatement("rollback")


def _named(p: _P, kind: SessionKind) -> SessionStatement:
    """The rest of a statement that names one object (a savepoint, a prepared statement)."""
    name = p.ident()
    p.end()
    return SessionStatement(kind, name)


def _savepoint(p: _P) -> SessionStatement:
    return _named(p, "savepoint")


def _release(p: _P) -> SessionStatement:
    p.accept("savepoint")
    return _named(p, "release")


def _discard(p: _P) -> SessionStatement:
    what = p.accept("all", "plans", "sequences", "temp", "temporary")
    if what is None:
        raise p.error()
    p.end()
    return SessionStatement("discard", "temp" if what == "temporary" else what)


def _deallocate(p: _P) -> SessionStatement:
    p.accept("prepare")
    if p.accept("all"):
        p.end()
        return SessionStatement("deallocate", None)
    return _named(p, "deallocate")


def _unlisten(p: _P) -> SessionStatement:
    p.rest_words()
    return SessionStatement("noop", name="UNLISTEN")


_PARSERS = {
    "set": _set,
    "reset": _reset,
    "show": _show,
    "begin": _begin,
    "start": _start,
    "commit": _commit,
    "end": _commit,
    "rollback": _rollback,
    "abort": _rollback,
    "savepoint": _savepoint,
    "release": _release,
    "discard": _discard,
    "deallocate": _deallocate,
    "unlisten": _unlisten,
}
