"""The released rows, fetched free, when PostgreSQL refuses a statement's post-processing over them.

A released group key can be a value the statement's own expressions can't take: one unit's row
makes ``'-infinity'`` a key past partition selection, and ``ts - TIMESTAMP '2000-01-01'`` over
it is PostgreSQL's 22008 ``cannot subtract infinite timestamps``. The release was charged and
stored before the post-processing ran, and every free repeat fails the same way: the analyst
would hold a paid answer they can't read. The error stays PostgreSQL's (its SQLSTATE and words:
the released values are public, PostgreSQL would refuse the same over them), and its hint names
the statement that returns the released rows themselves at no cost: the aggregate alone, its
group keys and aggregates as written (a tree's leaf as it stands in the statement; a flat
statement's ``SELECT <keys>, <aggregates> FROM ... WHERE ... GROUP BY <keys>``), with the
``SET dpsql.epsilon`` it was measured at when that is not the session's.

That statement's free-repeat key (:func:`dpsql.execute.repeat_keys.repeat_key`, as a flat statement
computes it) is pointed at the stored release (:meth:`dpsql.budget.ledger.Ledger.alias_answer`)
only when the statement measures exactly what was released (the same table, joins, filter,
group keys and aggregates: :func:`_same_measurement`), so that asking it returns the very rows
already paid for: a stored release answered again, no new measurement, no charge. If it was
answered before, its own earlier answer stays (nothing is replaced). Grouping sets are not
offered (their released rows carry the set number, which no statement of its own returns).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.errors import ConnectionException, DpsqlError
from dpsql.execute.prepared import PrivateQuery
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis
from dpsql.sql.nodes import POSTGRES

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext


def bare_sql(a: Analysis) -> str | None:
    """``SELECT <group keys>, <aggregates> FROM <table and joins> [WHERE] [GROUP BY]`` of a
    flat statement's analysis (what its release holds); None with grouping sets."""
    if a.grouping_sets:
        return None
    try:
        items = [g.expr.copy() for g in a.group_keys]
        items += [exp.maybe_parse(s.sql, dialect="postgres") for s in a.statistics]
        table = exp.to_table(a.table, dialect="postgres")
        q = exp.select(*items).from_(exp.alias_(table, a.alias, table=True) if a.alias else table)
        for j in a.joins:
            q = q.join(j.copy())
        if a.where is not None:
            q = q.where(a.where.copy())
        if a.group_keys:
            q = q.group_by(*[g.expr.copy() for g in a.group_keys])
        return q.sql(POSTGRES)
    except Exception:  # a shape this rebuild does not know: no offer, the error stands
        return None


def _same_measurement(a: Analysis, b: Analysis) -> bool:
    """Whether ``b`` releases exactly what ``a`` did (its stored rows answer ``b``)."""

    def sig(x: Analysis) -> tuple[object, ...]:
        return (
            x.table,
            x.private.privacy_unit,
            None if x.where is None else x.where.sql(POSTGRES),
            tuple(j.sql(POSTGRES) for j in x.joins),
            tuple(g.expr.sql(POSTGRES) for g in x.group_keys),
            tuple((g.keys, g.keys_from, g.null_key) for g in x.group_keys),
            tuple((s.func, s.measures, s.lo, s.hi, s.pg_type) for s in x.statistics),
            x.measures,
            x.grouping_sets,
            x.pre_join_rows,
        )

    try:
        return sig(a) == sig(b)
    except Exception:
        return False


def _epsilon_text(eps: Fraction) -> str:
    """``eps`` as ``SET dpsql.epsilon`` reads it back exactly (a decimal, else ``'n/d'``)."""
    d = eps.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    if d != 1:
        return f"'{eps.numerator}/{eps.denominator}'"
    places = 0
    while (eps * 10**places).denominator != 1:
        places += 1
    digits = str(int(eps * 10**places)).rjust(places + 1, "0")
    return f"{digits[:-places]}.{digits[-places:]}" if places else digits


def offer(
    engine: EngineContext,
    session: SessionContext,
    scope: str,
    text: str | None,
    released: Analysis,
    stored_key: str,
    epsilon: Fraction,
    key_of: Callable[[PrivateQuery, SessionContext], str],
) -> str | None:
    """Point ``text``'s free-repeat key at the release stored under ``stored_key`` (measured at
    ``epsilon``) and return how to ask it (``SET ...; SELECT ...``); None when ``text`` does
    not measure exactly that release or there is no ledger to keep it. ``key_of``: the flat
    private path's free-repeat key of a statement in a session
    (:func:`dpsql.execute.repeat_keys.flat_key`)."""
    ledger = engine.ledger
    if ledger is None or text is None or engine.policy.repeats == "off":
        return None
    try:
        bare = engine.prepare_in_scope(text, scope)
        if not isinstance(bare, PrivateQuery) or bare.param_count:
            return None
        own = replace(session, epsilon=epsilon, settings=dict(session.settings))
        if not _same_measurement(released, bare.analysis):
            return None
        key = key_of(bare, own)
        if not ledger.alias_answer(session.analyst, stored_key, key):
            return None
        default, _ = engine.privacy_params(session, bare.analysis)
    except DpsqlError:
        return None
    setting = "" if default == epsilon else f"SET dpsql.epsilon = {_epsilon_text(epsilon)}; "
    return f"{setting}{text}"


def hint(e: DpsqlError, offers: list[tuple[str, str]]) -> None:
    """Add to ``e``'s hint the statements that return the stored released rows free."""
    if isinstance(e, ConnectionException) or not offers:
        return
    if len(offers) == 1:
        text = (
            "The released rows are stored: this statement returns them as they are, at no "
            f"cost (to compute over them, for instance guarded by isfinite()):\n{offers[0][1]}"
        )
    else:
        each = "\n".join(f"{label}: {sql}" for label, sql in offers)
        text = (
            "Each aggregate's released rows are stored: these statements return them as they "
            f"are, at no cost:\n{each}"
        )
    e.hint = f"{e.hint} {text}" if e.hint else text


__all__ = ["bare_sql", "hint", "offer"]
