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
* ``pg_stat_activity`` has a row for each of the analyst's own sessions on this dpsql process
  (its pid, database, user, application_name, state, backend_start; never another analyst's,
  nor an upstream backend): :func:`activity_rows`;
* ``pg_cancel_backend(pid)`` is true for the session's own pid (nothing else of the session runs
  while it does) and for another of the analyst's sessions, whose running statement it cancels
  (as the protocol's CancelRequest does); ``pg_terminate_backend(pid)`` of another of the
  analyst's sessions cancels its statement and ends it (FATAL 57P01, as PostgreSQL). Any other
  pid is false (PostgreSQL answers false for a pid that is not a backend's). The signals are
  sent by the engine before the statement runs, for the pids its calls name
  (:func:`signal_targets`: calls in the select list of a plain SELECT, as Superset SQL Lab's
  ``SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = '...'``); ``signalled``
  holds those, and the calls answer true exactly for them.

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

import json
from dataclasses import dataclass, replace

from sqlglot import exp

from dpsql.catalog.build import cast_to
from dpsql.catalog.regrole import LABEL
from dpsql.session import Activity, SessionContext

SESSION_FUNCTIONS = frozenset({"pg_backend_pid", "pg_cancel_backend", "pg_terminate_backend"})
SIGNALS = ("pg_cancel_backend", "pg_terminate_backend")


@dataclass(frozen=True)
class SessionInfo:
    """What a session-information function reads: the client's database ("" when the engine is
    used without a wire session: the upstream's own is reported) and its process id (0: none)."""

    database: str = ""
    backend_pid: int = 0
    settings: tuple[tuple[str, str], ...] = ()  # the session's own (SET, options), lower-case
    analyst: str = ""
    activity: tuple[Activity, ...] = ()  # the analyst's sessions (pg_stat_activity's rows)
    signalled: frozenset[int] = frozenset()  # the sessions this statement's calls signalled

    @classmethod
    def of(cls, session: SessionContext) -> SessionInfo:
        settings = tuple(sorted((k.lower(), v) for k, v in session.settings.items()))
        d = session.directory
        activity = d.activity(session.analyst) if d is not None else ()
        return cls(session.database, session.backend_pid, settings, session.analyst, activity)

    def with_signalled(self, pids: frozenset[int]) -> SessionInfo:
        return replace(self, signalled=pids)

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
    settings = tuple(sorted((k.lower(), v) for k, v in session.settings.items()))
    info = SessionInfo(session.database, session.backend_pid, settings)
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
        return _one_of(node.expressions[0], sorted(info.signalled))
    if name == "pg_cancel_backend" and len(node.expressions) == 1 and info.backend_pid:
        return _one_of(node.expressions[0], [info.backend_pid, *sorted(info.signalled)])
    return None


def _one_of(arg: exp.Expr, pids: list[int]) -> exp.Expr:
    """``COALESCE(CAST(arg AS INT4) IN (pids), FALSE)``: true exactly for ``pids`` (FALSE when
    there is none); the argument is still evaluated (and cast) as PostgreSQL's call does."""
    if not pids:
        return exp.false()
    val = cast_to(arg.copy(), "INT4")
    test = exp.In(this=val, expressions=[exp.Literal.number(p) for p in pids])
    return exp.Coalesce(this=exp.Paren(this=test), expressions=[exp.false()])


def memoizable(text: str) -> bool:
    """Whether a statement's rewrite may be memoized: not when it reads the server's sessions
    (``pg_stat_activity``, the signals), which come and go."""
    low = text.lower()
    return "pg_stat_activity" not in low and not any(f in low for f in SIGNALS)


def signal_targets(tree: exp.Expr) -> tuple[exp.Select, tuple[bool, ...]] | None:
    """The query whose rows are the pids ``tree``'s ``pg_cancel_backend`` /
    ``pg_terminate_backend`` calls are given, one column per call (``CAST(arg AS INT4)``), or
    None when that is not known without running ``tree`` itself (with, per column, whether the
    call is ``pg_terminate_backend``): the calls must all be items of
    the select list of a plain SELECT (no GROUP BY, DISTINCT, ORDER BY, LIMIT, window, set
    operation or CTE), whose rows are then exactly the rows the calls run for. Superset SQL
    Lab's cancel: ``SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = '42'``
    -> ``SELECT CAST(pid AS INT4) FROM pg_stat_activity WHERE pid = '42'``."""
    if not isinstance(tree, exp.Select):
        return None
    if any(tree.args.get(k) for k in ("group", "having", "distinct", "order", "limit", "offset",
                                      "with", "qualify", "windows")):  # fmt: skip
        return None
    calls = [c for c in tree.find_all(exp.Anonymous) if c.name.lower() in SIGNALS]
    if not calls:
        return None
    items = []
    terminate = tuple(c.name.lower() == "pg_terminate_backend" for c in calls)
    for c in calls:
        top = _outer(c)
        if isinstance(top.parent, exp.Alias):
            top = top.parent
        if top.parent is not tree or top.arg_key != "expressions" or not c.expressions:
            return None
        items.append(cast_to(c.expressions[0].copy(), "INT4"))
    if any(isinstance(n, exp.Window) for n in tree.walk()):
        return None
    probe = tree.copy()
    probe.set("expressions", items)
    return probe, terminate


def activity_rows(info: SessionInfo) -> str:
    """``pg_stat_activity``'s rows of the analyst's sessions, as the JSON array
    :func:`jsonb_populate_recordset` reads (columns it does not name stay NULL)."""
    return json.dumps(
        [
            {
                "datname": a.database or info.database,
                "pid": a.pid,
                "usename": info.analyst,
                "application_name": a.application_name,
                "backend_start": a.backend_start,
                "state": a.state,
                "backend_type": "client backend",
            }
            for a in info.activity
        ],
        separators=(",", ":"),
    )


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
