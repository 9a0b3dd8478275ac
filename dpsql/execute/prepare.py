"""Prepare: a statement's text to its :data:`~dpsql.execute.prepared.Prepared` (one class per kind).

Parse, check the query's size, classify it under the analyst's view (:mod:`dpsql.execute.classify`)
and, for a private statement, analyze it: one flat block is a
:class:`~dpsql.execute.prepared.PrivateQuery`, several DP leaves a
:class:`~dpsql.execute.prepared.TreeQuery` (:mod:`dpsql.execute.tree`), a zero-row shape a public
statement and ``LIMIT $1`` over a private table, or an aggregate over a parameter
(``SUM(quantity / $1)``: :mod:`dpsql.sql.aggregate_params`), a
:class:`~dpsql.execute.prepared.DeferredQuery` that :func:`bound_limit` prepares again with its
values. :class:`dpsql.engine.Engine` parses (and
sends an EXPLAIN to :mod:`dpsql.explain`), calls :func:`prepare_parsed` and caches what it returns;
nothing here reads data or spends budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.budget import route
from dpsql.errors import DpsqlError
from dpsql.execute.classify import classify
from dpsql.execute.group_keys import inline_key_tables
from dpsql.execute.prepared import (
    CatalogQuery,
    DeferredQuery,
    EmptyQuery,
    LedgerQuery,
    Prepared,
    PrivateQuery,
    PublicQuery,
    SessionCommand,
    fingerprint,
)
from dpsql.execute.tree_prepare import prepare_tree
from dpsql.policy.model import Policy
from dpsql.sql.aggregate_params import aggregate_params, operand_oids, typed_values, with_values
from dpsql.sql.analysis import Analysis
from dpsql.sql.analyze import analyze
from dpsql.sql.analyze_complexity import check_query_blocks
from dpsql.sql.bi_shapes import (
    distinct_as_group_by,
    limit_param,
    limit_params_zeroed,
    zero_row_query,
)
from dpsql.sql.bind import bind, param_count
from dpsql.sql.labels import keep_call_labels
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.parse import ParsedEmpty, ParsedQuery, ParsedStatement
from dpsql.sql.public import check_public
from dpsql.sql.unit_joins import merge_unit_joins

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext


def prepare_parsed(
    engine: EngineContext, st: ParsedStatement, text: str, scope: str = ""
) -> Prepared:
    """Classify (and analyze) the parsed statement ``st`` under ``scope``'s view
    (:meth:`dpsql.engine.Engine.scope`); ``text`` is what was parsed. An EXPLAIN is
    :func:`dpsql.explain.run.prepare_explain`'s."""
    if not isinstance(st, ParsedQuery):
        cls = (
            LedgerQuery  # SHOW dpsql.budget: the analyst's budget, from the ledger
            if route.is_show_budget(text)
            else EmptyQuery
            if isinstance(st, ParsedEmpty)
            else SessionCommand
        )
        return cls(text=text, statement=st, fingerprint=fingerprint(None, text))
    tree = st.tree
    check_query_blocks(tree)  # every kind: PostgreSQL's planner is not bounded either
    view = engine.view(scope or None)
    qkind = classify(tree, view)
    analysis = None
    if qkind == "private":
        tree = merge_unit_joins(tree, view)  # two per-person derived tables joined: one
        try:
            tree, analysis = _private_shape(tree, view, engine.column_order)
        except DpsqlError as error:  # not one flat block: a tree of DP leaves, or refused
            try:
                return prepare_tree(engine, st, tree, scope, error)
            except DpsqlError as refused:
                later = _aggregate_params_deferred(engine, st, text, tree, scope, refused)
                if later is not None:  # SUM(quantity / $1): analyzed with its value
                    return later
                zeroed = limit_params_zeroed(tree)
                if zeroed is None or zero_row_query(zeroed, view, engine.column_order) is None:
                    own = _constant_error(engine, tree, refused)
                    if own is not None:
                        raise own from None
                    raise
                return DeferredQuery(
                    text=text, statement=st, fingerprint=fingerprint(tree, text), scope=scope,
                    tree=tree, param_count=param_count(tree), deferred=refused,
                )  # fmt: skip
        if analysis is not None:
            # a key table's values are public: read now, they narrow G (group_keys.py)
            analysis = inline_key_tables(engine, analysis, text, tree, scope)
            # (the parse's rendering of this very tree, where it is the parse's: not written
            # again)
            written = st.written if tree is st.tree else None
            return PrivateQuery(
                text=text, statement=st, fingerprint=fingerprint(tree, text, written), scope=scope,
                tree=tree, analysis=analysis, param_count=param_count(tree),
            )  # fmt: skip
        qkind = "public"
    if qkind == "dpsql":  # SELECT ... FROM dpsql.budget / dpsql.history
        return LedgerQuery(
            text=text, statement=st, fingerprint=fingerprint(tree, text), scope=scope,
            tree=tree, param_count=param_count(tree),
        )  # fmt: skip
    if qkind == "public":
        check_public(tree)
    keep_call_labels(tree)  # SELECT now() is a column "now", as in PostgreSQL
    query = PublicQuery if qkind == "public" else CatalogQuery
    return query(
        text=text, statement=st, fingerprint=fingerprint(tree, text), scope=scope,
        tree=tree, param_count=param_count(tree),
    )  # fmt: skip


# 42501: a range the analyzer can't bound (SUM(amount % 0)) may be a constant PostgreSQL refuses
_CONSTANT_REFUSALS = frozenset({"22023", "0A000", "22007", "22008", "22P02", "42501", "42883"})


def _constant_error(
    engine: EngineContext, tree: exp.Expr, refused: DpsqlError
) -> DpsqlError | None:
    """PostgreSQL's own error for a private statement's constants
    (:mod:`dpsql.execute.constant_probe`), for a refusal of the analyzer's that may be about a
    constant (``CAST('1.5x' AS int)``, ``TO_DATE('xx', 'YYYY')``): PostgreSQL raises it from the
    constant alone, before reading a row."""
    if refused.sqlstate not in _CONSTANT_REFUSALS:
        return None
    from dpsql.execute.constant_probe import constant_error

    return constant_error(engine, tree, operators=refused.sqlstate == "42883")


def _aggregate_params_deferred(
    engine: EngineContext,
    st: ParsedQuery,
    text: str,
    tree: exp.Expr,
    scope: str,
    refused: DpsqlError,
) -> DeferredQuery | None:
    """A private statement refused as written (42501) that has a ``$n`` in an aggregate's
    argument (``SUM(quantity / $1)``: its range depends on the value) as a
    :class:`DeferredQuery` analyzed with its values (:func:`bound_limit`), when it is accepted
    with 1 for them; else None (refused whatever the value: the refusal stands at Parse)."""
    numbers = aggregate_params(tree)
    if refused.sqlstate != "42501" or not numbers:
        return None
    try:
        shape = engine.prepare_in_scope(
            typed_values(tree, dict.fromkeys(numbers, 1), {}).sql(POSTGRES), scope
        )
    except DpsqlError:
        return None
    count = param_count(tree)
    column = shape.analysis.column if isinstance(shape, PrivateQuery) else _no_column
    return DeferredQuery(
        text=text, statement=st, fingerprint=fingerprint(tree, text), scope=scope, tree=tree,
        param_count=count, deferred=refused, param_oids=operand_oids(tree, numbers, column, count),
    )  # fmt: skip


def _no_column(node: exp.Column) -> None:
    return None


def described_shape(
    engine: EngineContext, prepared: DeferredQuery, param_types: Sequence[int] = ()
) -> Prepared:
    """What describes a :class:`DeferredQuery` before its values are bound: with ``LIMIT 0``
    (the zero-row shape) and 1 of each aggregate parameter's type (``param_types``, a Parse's
    OIDs, 0 where unspecified; else :attr:`DeferredQuery.param_oids`) written inline."""
    numbers = aggregate_params(prepared.tree)
    if not numbers:
        return bound_limit(engine, prepared, [0] * prepared.param_count)
    tree = prepared.tree.copy()
    for key in ("limit", "offset"):
        value = limit_param(tree, key)
        if value is not None:
            value.replace(exp.Literal.number(0))
    oids = _param_oids(prepared, param_types)
    shape = typed_values(tree, dict.fromkeys(numbers, 1), oids).sql(POSTGRES)
    return engine.prepare_in_scope(shape, prepared.scope)


def _param_oids(prepared: DeferredQuery, declared: Sequence[int]) -> dict[int, int]:
    """The type of each ``$n`` (numbered from 1): ``declared``'s, else the inferred one."""
    known = prepared.param_oids
    return {
        n: (declared[n - 1] if n <= len(declared) and declared[n - 1] else 0)
        or (known[n - 1] if n <= len(known) else 0)
        for n in range(1, prepared.param_count + 1)
    }


def bound_limit(
    engine: EngineContext, prepared: DeferredQuery, params: Sequence[object]
) -> Prepared:
    """A :class:`DeferredQuery` with ``params`` written inline, prepared as such. ``LIMIT 0``
    is the zero-row shape it was prepared for; an aggregate's parameter is written as a
    literal of its type (:attr:`DeferredQuery.param_oids`: ``quantity / CAST(2.5 AS DOUBLE
    PRECISION)``) and the statement analyzed in full with it, as if so written; any other
    value gets the refusal the statement gets with that value inline, said with the values.

    Raises:
        DpsqlError: that refusal (42501 for raw rows of a private table, or an aggregate's
            argument that the value leaves unbounded: ``quantity / 0``).
    """
    tree = prepared.tree.copy()
    for key in ("limit", "offset"):  # the count as a literal (sent as text or cast too)
        value = limit_param(tree, key)
        param = value.this if isinstance(value, exp.Cast) else value
        if value is None or not isinstance(param, exp.Parameter):
            continue
        i = int(param.this.this) - 1 if isinstance(param.this, exp.Literal) else -1
        got = params[i] if 0 <= i < len(params) else None
        if isinstance(got, str) and got.strip().lstrip("+-").isdigit():
            got = int(got.strip())
        if isinstance(got, int) and not isinstance(got, bool):
            value.replace(exp.Literal.number(got))
    values = {n: params[n - 1] for n in aggregate_params(tree) if n <= len(params)}
    oids = _param_oids(prepared, ())
    try:
        typed = typed_values(tree, values, oids) if values else tree
        bound = engine.prepare_in_scope(bind(typed, params).sql(POSTGRES), prepared.scope)
    except DpsqlError as refused:
        if values:
            raise with_values(refused, values, oids) from None
        raise
    if isinstance(bound, DeferredQuery) or bound.param_count:  # never: values inline
        raise prepared.deferred
    return bound


def _private_shape(
    tree: exp.Expr, view: Policy, order: Callable[[str], Sequence[str]]
) -> tuple[exp.Expr, Analysis | None]:
    """A private statement's tree and analysis; a zero-row shape (``LIMIT 0``, ``WHERE
    false``) is a public statement over the declared columns (analysis None), ``SELECT
    DISTINCT`` of columns with declared keys their GROUP BY (:mod:`dpsql.sql.bi_shapes`)."""
    zero = zero_row_query(tree, view, order)
    if zero is not None:
        return zero, None
    grouped = distinct_as_group_by(tree)
    if grouped is not None:
        try:
            a = analyze(grouped, view)
        except DpsqlError:
            a = None
        if a is not None and not a.needs_selection:  # the declared keys: free, no selection
            return grouped, a
    return tree, analyze(tree, view)


def typed_like(old: Prepared, new: Prepared) -> Prepared:
    """``new`` (``old``'s text analyzed again: another zone or day) with the parameter types
    ``old`` was given (a Parse's: :attr:`DeferredQuery.param_oids`)."""
    if isinstance(old, DeferredQuery) and isinstance(new, DeferredQuery) and new is not old:
        return replace(new, param_oids=old.param_oids)
    return new
