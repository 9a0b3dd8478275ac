"""The SQL a public or catalog statement runs upstream, and its cheap (memoized) forms.

A public statement's checks ran at prepare time on the tree with its placeholders; a catalog
statement's checks read the parameter values, so they run again on the bound tree. The engine's
SQL memo (``Engine.caches.sql``) keeps the texts, a public statement's
:class:`~dpsql.sql.bind.Template` and its ``$n``-placeholder text. Describing such a statement
(:func:`describe_public`) asks PostgreSQL too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from dpsql.catalog.check import check_catalog_query
from dpsql.catalog.session_functions import (
    SessionInfo,
    memoizable,
    session_key,
    signal_targets,
)
from dpsql.errors import InternalError, UnsupportedSql
from dpsql.execute import shadows
from dpsql.execute.backend import CancelToken, describe_statement
from dpsql.execute.prepared import CatalogQuery, Prepared, PublicQuery
from dpsql.result import ResultColumn
from dpsql.session import SessionContext
from dpsql.sql.bind import Template, bind, check_params, param_numbers, template
from dpsql.sql.nodes import POSTGRES

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext


def runnable_sql(
    engine: EngineContext,
    prepared: Prepared,
    session: SessionContext,
    params: Sequence[object] = (),
) -> str:
    """The SQL a public or catalog statement runs upstream with ``params`` bound
    (:meth:`dpsql.engine.Engine.runnable_sql`).

    This is all the engine's ``execute`` does for these kinds before running it, so a caller
    with its own (asynchronous) connection to the upstream may run the text itself.

    Raises:
        UndefinedParameter, ProtocolViolation: wrong number of parameters (42P02, 08P01).
        PrivacyViolation, UnsupportedSql: the catalog checks refuse the bound statement.
    """
    check_params(prepared.tree, prepared.param_count, len(params))
    engine.check_scope(prepared, session)
    text = cached_sql(engine, prepared, session, params)
    if text is None:
        tree = runnable_tree(engine, prepared, params, session)
        # a catalog statement's tree is check_catalog_query's new one: rendered without the
        # generator's copy of it (most of the rendering's CPU; a public one may be prepared's)
        text = tree.sql(POSTGRES, copy=not isinstance(prepared, CatalogQuery))
        key = sql_key(prepared, session, params)
        if key is not None:
            engine.caches.sql.remember(key, text)
    return text


def cached_sql(
    engine: EngineContext,
    prepared: Prepared,
    session: SessionContext,
    params: Sequence[object] = (),
) -> str | None:
    """:func:`runnable_sql` when it is cheap (memoized, or a public statement's
    :class:`~dpsql.sql.bind.Template` filled in), else None. Never slow, never raises for
    a statement :func:`runnable_sql` accepts."""
    if prepared.scope != engine.scope(session.analyst):
        return None  # prepared under another analyst's view: runnable_sql checks it
    if not shadows.checked(engine, prepared.text, prepared.scope):
        return None  # runnable_sql checks it against the upstream's own functions first
    memo = engine.caches.sql
    if isinstance(prepared, PublicQuery) and params and len(params) == prepared.param_count:
        tkey = ("template", prepared.text)
        tpl = memo.get(tkey)
        if tpl is None:
            tpl = template(prepared.tree) or False
            memo.remember(tkey, tpl)
        if isinstance(tpl, Template):
            return str(tpl.render(params))
    key = sql_key(prepared, session, params)
    hit = memo.get(key) if key is not None else None
    return None if hit is None else str(hit)


def parameterized_sql(
    engine: EngineContext, prepared: Prepared, session: SessionContext
) -> str | None:
    """A public statement's SQL with its ``$n`` placeholders kept (memoized), for a caller
    that passes the parameters to PostgreSQL as values; None when that is not equivalent to
    :func:`runnable_sql`: not a public statement (a catalog statement's checks read the
    parameter values), prepared under another analyst's view, a placeholder that is not a
    plain ``$n``, or an unused number (``SELECT $2``: PostgreSQL could not type ``$1``
    from an untyped value). A public statement's checks ran at prepare time on the tree with
    its placeholders, so nothing checked depends on the values."""
    if not isinstance(prepared, PublicQuery) or not prepared.param_count:
        return None
    if prepared.scope != engine.scope(session.analyst):
        return None
    if not shadows.checked(engine, prepared.text, prepared.scope):
        return None
    key = ("parameterized", prepared.text)
    hit = engine.caches.sql.get(key)
    if hit is None:
        tree = prepared.tree
        plain = (
            template(tree) is not None
            and all(map(value_position, tree.find_all(exp.Parameter)))
            and param_numbers(tree) == set(range(1, prepared.param_count + 1))
        )
        hit = tree.sql(POSTGRES) if plain else False
        engine.caches.sql.remember(key, hit)
    return str(hit) if hit else None


def signalling_sql(
    engine: EngineContext,
    prepared: Prepared,
    session: SessionContext,
    params: Sequence[object],
    cancel: CancelToken | None = None,
) -> str | None:
    """The SQL of a catalog statement calling ``pg_cancel_backend`` / ``pg_terminate_backend``
    in a wire session, after the signals it asks for are sent; None for any other statement.

    PostgreSQL's calls signal a backend as the row is computed; dpsql's sessions are not
    upstream backends, so the pids the calls are given are read first, by the statement with
    its select list replaced by the calls' arguments
    (:func:`dpsql.catalog.session_functions.signal_targets`, run over the same snapshot of
    ``pg_stat_activity``), each one of the analyst's other sessions is signalled (the
    server's :class:`~dpsql.session.SessionDirectory`: only the analyst's own), and the
    statement runs with the calls true exactly for those. Superset SQL Lab's Stop."""
    d = session.directory
    if d is None or not isinstance(prepared, CatalogQuery) or memoizable(prepared.text):
        return None
    check_params(prepared.tree, prepared.param_count, len(params))
    engine.check_scope(prepared, session)
    info = SessionInfo.of(session)  # one snapshot of the sessions, for the probe and the answer
    tree = runnable_tree(engine, prepared, params, session, raw=True)
    got = signal_targets(tree)
    signalled: set[int] = set()
    if got is not None:
        probe, terminate = got
        view = engine.view(session.analyst)
        sql = check_catalog_query(probe, view, session.analyst, info).sql(POSTGRES)
        others = {a.pid for a in info.activity} - {session.backend_pid}
        for row in engine.backend.run(sql, private=False, cancel=cancel).rows:
            for pid, end in zip(row, terminate, strict=True):
                if pid in others and d.signal(session.analyst, pid, end):
                    signalled.add(pid)
    info = info.with_signalled(frozenset(signalled))
    view = engine.view(session.analyst)
    return check_catalog_query(tree, view, session.analyst, info).sql(POSTGRES)


def runnable_tree(
    engine: EngineContext,
    prepared: Prepared,
    params: Sequence[object],
    session: SessionContext,
    *,
    raw: bool = False,
) -> exp.Expr:
    """The tree a public or catalog statement runs: ``params`` bound, catalog checks applied.

    Raises:
        PrivacyViolation, UnsupportedSql: the catalog checks refuse the bound statement, or
            ``prepared`` is neither public nor catalog.
    """
    if not isinstance(prepared, (PublicQuery, CatalogQuery)):
        raise UnsupportedSql(f"{prepared.kind} statements are not answered here yet")
    scope = engine.scope(session.analyst)
    shadows.check(engine, prepared.text, prepared.tree, scope=scope)  # before it runs
    tree = bind(prepared.tree, params) if params else prepared.tree
    if raw:
        return tree  # checked, bound: the catalog checks are the caller's
    if isinstance(prepared, CatalogQuery):
        info = SessionInfo.of(session)
        return check_catalog_query(tree, engine.view(session.analyst), session.analyst, info)
    return tree


def value_position(p: exp.Parameter) -> bool:
    """Whether PostgreSQL reads a literal in ``p``'s place as it reads a parameter there: not
    where its grammar treats a constant specially (``ORDER BY 1`` / ``GROUP BY 1`` are column
    positions, ``DISTINCT ON (1)`` too, and a minus sign is folded into the constant, which can
    change its type: ``-2147483648`` is an int4)."""
    node: exp.Expr = p
    while isinstance(node.parent, (exp.Paren, exp.Tuple)):
        node = node.parent
    return not isinstance(node.parent, _CONSTANT_SYNTAX)


_CONSTANT_SYNTAX = (exp.Neg, exp.Ordered, exp.Group, exp.Distinct, exp.Rollup, exp.Cube,
                    exp.GroupingSets)  # fmt: skip


def sql_key(
    prepared: Prepared, session: SessionContext, params: Sequence[object]
) -> tuple[Any, ...] | None:
    """The memo key of a statement's runnable SQL: its text, the analyst, each parameter's
    type and repr (so 1, True and 1.0 differ) and, for a text that may call a session function
    (``pg_backend_pid()``, ``current_database()``), the session's values; None when the
    parameters are too long to keep."""
    if not isinstance(prepared, (PublicQuery, CatalogQuery)):
        return None
    values = tuple((type(v).__name__, repr(v)) for v in params)
    if sum(len(r) for _, r in values) > 256 or not memoizable(prepared.text):
        return None
    own = session_key(prepared.text, session)
    if own is not None:
        values += (("session", repr(own)),)
    return ("sql", prepared.text, session.analyst, values)


def describe_public(
    engine: EngineContext,
    prepared: PublicQuery | CatalogQuery,
    session: SessionContext,
    param_types: Sequence[int],
) -> tuple[ResultColumn, ...]:
    """A public or catalog statement's result columns, as PostgreSQL describes them
    (:meth:`dpsql.engine.Engine.describe`): a zero-row run of the statement, or with parameters
    a Describe of it upstream. ``param_types``: the types the statement was prepared with."""
    # PostgreSQL's Describe resolves names and types (NULL::hidden would describe)
    shadows.check(engine, prepared.text, prepared.tree, scope=engine.scope(session.analyst))
    if prepared.param_count == 0:
        tree = runnable_tree(engine, prepared, (), session)
        if not isinstance(tree, exp.Query):
            raise InternalError("a public statement that is not a query was described")
        q = exp.select("*").from_(tree.subquery("_dp_describe")).limit(0)
        return engine.backend.run(q.sql(POSTGRES), private=False).columns
    # With parameters, checks that need their values run at Execute; PostgreSQL
    # describes the statement without running it.
    tree, fresh = prepared.tree, isinstance(prepared, CatalogQuery)
    if isinstance(prepared, CatalogQuery):
        info = SessionInfo.of(session)
        tree = check_catalog_query(tree, engine.view(session.analyst), session.analyst, info)
    oids = _describe_oids(prepared.param_count, param_types)
    # check_catalog_query's tree is new: rendered without the generator's copy of it
    return describe_statement(engine.backend, tree.sql(POSTGRES, copy=not fresh), oids)


def _describe_oids(count: int, param_types: Sequence[int]) -> list[int]:
    """The parameter types to describe a statement upstream with: as Parse declared them
    (``param_types``), 0 (PostgreSQL infers it) where Parse left one unspecified. A parameter
    the statement does not use (``$1`` of ``SELECT $2``) has a declared type: Parse refuses it
    otherwise (:func:`~dpsql.sql.bind.check_param_types`)."""
    return (list(param_types) + [0] * count)[:count]
