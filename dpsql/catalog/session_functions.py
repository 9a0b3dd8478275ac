"""Session-information functions answered for the client's own dpsql session.

A client's connection ends at dpsql, not at an upstream backend, so what PostgreSQL answers
about "this session" is dpsql's session, never the upstream connection that happens to run the
statement (which is pooled and shared):

* ``pg_backend_pid()`` is the process id dpsql sent in BackendKeyData (the one a CancelRequest
  names); Superset SQL Lab reads it before every query;
* ``current_database()`` and ``current_catalog`` are the database the client named at startup
  (``dpsql serve`` accepts only the database it serves, 3D000 otherwise);
* ``current_setting('name')`` of a setting the session holds itself (SET, the startup
  ``options``, ``application_name``) is the session's value, not the upstream connection's;
* ``pg_cancel_backend(pid)`` is true for the session's own pid (nothing else of the session runs
  while it does) and false for any other (through dpsql no other backend is visible; PostgreSQL
  answers false for a pid that is not a backend's). A running statement is cancelled with the
  protocol's CancelRequest, which dpsql forwards upstream; ``pg_terminate_backend(pid)`` is
  false (``pg_stat_activity``, where Superset's cancel looks the pid up, is empty through dpsql).

The replacements are constants in the rewritten statement, typed and labelled as PostgreSQL
types and labels the calls, so the statement memo keys on the session's values
(:func:`dpsql.execute.public_sql.sql_key`).

>>> import sqlglot
>>> t = sqlglot.parse_one("SELECT pg_backend_pid(), current_database()", read="postgres")
>>> replace_session_functions(t, SessionInfo("demo", 42))
>>> t.sql("postgres")
'SELECT CAST(42 AS INT) AS "pg_backend_pid", CAST(\\'demo\\' AS NAME) AS "current_database"'
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dpsql.catalog.build import cast_to
from dpsql.catalog.regrole import LABEL
from dpsql.session import SessionContext

SESSION_FUNCTIONS = frozenset({"pg_backend_pid", "pg_cancel_backend", "pg_terminate_backend"})


@dataclass(frozen=True)
class SessionInfo:
    """What a session-information function reads: the client's database ("" when the engine is
    used without a wire session: the upstream's own is reported) and its process id (0: none)."""

    database: str = ""
    backend_pid: int = 0
    settings: tuple[tuple[str, str], ...] = ()  # the session's own (SET, options), lower-case

    @classmethod
    def of(cls, session: SessionContext) -> SessionInfo:
        settings = tuple(sorted((k.lower(), v) for k, v in session.settings.items()))
        return cls(session.database, session.backend_pid, settings)

    def setting(self, name: str) -> str | None:
        """The session's value of a setting it holds itself; ``application_name`` is the
        client's ("" when it sent none), never the upstream connection's."""
        got = dict(self.settings).get(name.lower())
        return "" if got is None and name.lower() == "application_name" else got


def session_key(
    text: str, session: SessionContext
) -> tuple[str, int, tuple[tuple[str, str], ...]] | None:
    """The session values a statement's rewrite may depend on, from a cheap look at its text
    (for the statement memo's key), or None when it calls no session function."""
    low = text.lower()
    if "current_" not in low and "backend" not in low:
        return None
    info = SessionInfo.of(session)
    own = ("pg_backend_pid", "pg_cancel_backend", "pg_terminate_backend")
    pid = info.backend_pid if any(w in low for w in own) else 0
    db = info.database if "current_database" in low or "current_catalog" in low else ""
    settings = info.settings if "current_setting" in low else ()
    return (db, pid, settings) if db or pid or settings else None


def replace_session_functions(tree: exp.Expr, info: SessionInfo) -> None:
    """Replace, in place, the session-information calls of ``tree`` by the session's values."""
    # inner calls first: pg_cancel_backend(pg_backend_pid())
    for node in reversed(list(tree.walk())):
        new = _replacement(node, info)
        if new is None:
            continue
        target, label = _outer(node), _label(node)
        new.meta[LABEL] = label
        if isinstance(target.parent, exp.Select) and target.arg_key == "expressions":
            new = exp.alias_(new, label, quoted=True)
        target.replace(new)


def _replacement(node: exp.Expr, info: SessionInfo) -> exp.Expr | None:
    if isinstance(node, (exp.CurrentDatabase, exp.CurrentCatalog)) or (
        isinstance(node, exp.Anonymous) and node.name.lower() in ("current_database",)
    ):
        if not info.database:
            return None
        return cast_to(exp.Literal.string(info.database), "NAME")
    if not isinstance(node, exp.Anonymous):
        return None
    name = node.name.lower()
    if name == "pg_backend_pid" and not node.expressions and info.backend_pid:
        return cast_to(exp.Literal.number(info.backend_pid), "INT4")
    if name == "current_setting" and len(node.expressions) == 1:
        arg = node.expressions[0]
        value = info.setting(arg.name) if isinstance(arg, exp.Literal) and arg.is_string else None
        return None if value is None else exp.Literal.string(value)
    if name == "pg_terminate_backend" and 1 <= len(node.expressions) <= 2 and info.backend_pid:
        return exp.false()  # dpsql ends no session from SQL (Superset reads pg_stat_activity first)
    if name == "pg_cancel_backend" and len(node.expressions) == 1 and info.backend_pid:
        arg = node.expressions[0].copy()
        own = exp.EQ(this=cast_to(arg, "INT4"), expression=exp.Literal.number(info.backend_pid))
        return exp.Coalesce(this=exp.Paren(this=own), expressions=[exp.false()])
    return None


def _outer(node: exp.Expr) -> exp.Expr:
    """The call with its ``pg_catalog.`` qualifier, when written so."""
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        return parent
    return node


def _label(node: exp.Expr) -> str:
    if isinstance(node, exp.CurrentCatalog):
        return "current_catalog"
    if isinstance(node, exp.CurrentDatabase):
        return "current_database"
    return node.name.lower()
