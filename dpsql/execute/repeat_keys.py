"""Free-repeat keys of a private statement: what makes two statements one release.

The key (:func:`repeat_key`) is the canonical statement's text without what only shapes its
post-processing (:func:`released_part`: LIMIT/OFFSET, an ORDER BY of outputs), the parameters
the release reads, the privacy settings, the analyst's view, the time zone where it matters and,
for a statement that reads the clock (``current_date``, ``now()``), the day of dpsql's clock in
the session's zone (the upstream's ``current_date``: yesterday's answer is not today's);
a statement with ``auto`` bounds keys on its own epsilon (:func:`auto_cache_key`). The in-flight
slot (:func:`slot`) an identical statement waits on, and the stored form of a release
(:func:`payload`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.execute import planning
from dpsql.execute.noise import Release
from dpsql.execute.prepared import PrivateQuery
from dpsql.session import SessionContext
from dpsql.sql.auto_bound_types import AutoBounds
from dpsql.sql.bind import param_numbers
from dpsql.sql.date_range_empty import CLOCKS
from dpsql.sql.grouping_sets import SetsPlan
from dpsql.sql.plan import Plan
from dpsql.sql.zone_identity import zone_matters
from dpsql.upstream.zone import UTC_NAME, ZONE, tzinfo_of

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext


def repeat_key(
    engine: EngineContext,
    prepared: PrivateQuery,
    params: Sequence[object],
    epsilon: Fraction,
    delta: Fraction,
    mechanism: str,
) -> str:
    """Same canonical query, parameters, epsilon, delta, mechanism, policy (as the analyst's
    view changes answers) and time zone where it matters (:mod:`dpsql.sql.zone_identity`) =>
    same answer. The canonical form of the statement's tree is
    memoized (a function of the tree alone; the memo holds the tree, so its id can't be reused)."""
    from dpsql.sql.canonical import cache_key as key
    from dpsql.sql.canonical import canonical

    tree = prepared.tree
    assert tree is not None
    hit = engine.caches.sql.get(("canonical", id(tree)))
    if hit is None or hit[0] is not tree:
        part = released_part(tree)
        clocked = any(part.find_all(*CLOCKS, exp.CurrentTime))
        hit = (tree, canonical(part), frozenset(param_numbers(part)), clocked)
        engine.caches.sql.remember(("canonical", id(tree)), hit)
    extra = engine.repeat_digest(prepared.scope)
    zone = ZONE.get()
    if zone != UTC_NAME and zone_matters(hit[0], engine.policy):  # another zone, another answer
        extra += f":TimeZone={zone}"
    if hit[3]:  # current_date / now(): the upstream's clock, another day another answer
        now, tz = engine.clock.now(), tzinfo_of(zone)
        # a zone Python can't read (a POSIX rule with daylight saving): its day is unknown
        # here (not the UTC day: the two differ for hours), so no run repeats another
        extra += f":day={now.astimezone(tz).date()}" if tz is not None else f":at={now}"
    return key(hit[1], released_params(params, hit[2]), epsilon, delta, mechanism, extra=extra)


def released_params(params: Sequence[object], used: frozenset[int]) -> list[object]:
    """``params`` as the release sees them: a value only the page reads (``LIMIT $2 OFFSET
    $3``, stripped by :func:`released_part`) is left out, so pages sent with bound parameters
    share one release as literal pages do; a parameter of the private part (``WHERE amount >
    $1``) stays, a different value a different release. Positions are kept (``$n``)."""
    return [p if i + 1 in used else None for i, p in enumerate(params)]


def released_part(tree: exp.Expr) -> exp.Expr:
    """What a statement's release depends on: ``tree`` without the LIMIT and OFFSET of its
    SELECT, nor an ORDER BY that reads no aggregate (keys, output names, ordinals). They only
    shape the post-processing query over the released groups (dpsql.sql.analyze_select puts
    them on the outer query alone), so pages of one grouped answer (``LIMIT 5 OFFSET 0``,
    ``OFFSET 5``, no LIMIT) share one release: one charge, the same numbers on every page. An
    ORDER BY with an aggregate stays: it can add a statistic to the release; so does one that
    reads anything but the SELECT's own outputs (an ordinal, an output name, a selected
    expression): ``ORDER BY s`` over a derived table's ``SUM(amount) AS s`` that the SELECT does
    not list adds that sum, and reusing the release of the statement without it failed."""
    from dpsql.sql import functions as fn

    if not isinstance(tree, exp.Select):
        return tree
    order = tree.args.get("order")
    strip = [k for k in ("limit", "offset") if tree.args.get(k) is not None]
    if (
        order is not None
        and not any(fn.is_aggregate(n) for n in order.walk())
        and all(_an_output(tree, o.this) for o in order.expressions)
    ):
        strip.append("order")
    if not strip:
        return tree
    out = tree.copy()
    for k in strip:
        out.set(k, None)
    return out


def _an_output(tree: exp.Select, e: exp.Expr) -> bool:
    """``e`` (an ORDER BY term of ``tree``) is one of its outputs: an ordinal, an output's name
    (unqualified), or an expression ``tree`` selects."""
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.Literal):
        return e.is_int
    if (
        isinstance(e, exp.Column)
        and not e.table
        and e.name in {s.alias_or_name for s in tree.expressions}
    ):
        return True
    return any(e == s.unalias() for s in tree.expressions)


def cache_key(
    engine: EngineContext, prepared: PrivateQuery, plan: Plan | SetsPlan, params: Sequence[object]
) -> str:
    """The repeat key of a statement at its plan's epsilon, delta and mechanism."""
    return repeat_key(engine, prepared, params, plan.epsilon, plan.delta, plan.mechanism)


def payload(rel: Release) -> bytes:
    """The release as the ledger stores it for free repeats (compact JSON, read back by
    :meth:`Release.from_json`): noisy values only, never a private row."""
    return json.dumps(rel.as_json(), separators=(",", ":")).encode()


def auto_cache_key(
    engine: EngineContext,
    prepared: PrivateQuery,
    plan: Plan | SetsPlan,
    params: Sequence[object],
    mech: str,
) -> str:
    """The repeat key of a statement with ``auto`` bounds: its own epsilon (not what is left
    after choosing bounds, which differs between the first run and later ones) and the
    requested mechanism."""
    return repeat_key(engine, prepared, params, plan.epsilon, plan.delta, f"auto-bounds:{mech}")


def applied_bounds(bounds: AutoBounds) -> str:
    """The ``auto`` contribution bounds a release was measured with, as stored beside it
    (:attr:`Release.bounds`): each bound's kind, column and value (released values); a bound
    kept at its fixed default by the guard is marked (its plan adds the left-out estimate to the
    column: Analysis.fell_back), so an answer measured with it is not a repeat of one measured
    with the same number chosen."""
    return ";".join(
        sorted(
            f"{c.kind}:{c.column}={c.value}{' fallback' if c.fallback and not c.wider else ''}"
            for c in bounds.chosen
        )
    )


def bounds_key(engine: EngineContext, session: SessionContext, key: str, known: AutoBounds) -> str:
    """The repeat key of a statement with ``auto`` bounds about to run with the stored bounds
    ``known``: ``key`` while the answer stored under it (if any) was measured with those bounds,
    else ``key`` with them. The bounds a statement reuses change when an earlier choice was the
    fixed defaults and the table's own rows per unit were stored since (newcomer23 #4: the
    notice's advice, run SELECT COUNT(*) over the whole table, then gave back the answer at R = 1
    described with the new R): the answer is then measured again with them, as a new release
    (its repeats free under their own key); the stored one stays what it was. Read only."""
    ledger = engine.ledger
    raw = ledger.peek(session.analyst, key) if ledger is not None else None
    if raw is None:
        return key
    stored = json.loads(raw).get("bounds")
    applied = applied_bounds(known)
    if stored is None or stored == applied:  # (None: stored before releases kept theirs)
        return key
    return f"{key}:bounds={applied}"


def flat_key(engine: EngineContext, prepared: PrivateQuery, session: SessionContext) -> str:
    """The free-repeat key :func:`run_private` computes for ``prepared`` (no parameters) in
    ``session``: with ``auto`` bounds all known (stored, or a stored fallback), the key of an
    answer measured with them (:func:`bounds_key`): where the answer stored under the plain key
    was measured with other bounds, the statement is measured again under its bounds' key, and
    a link made to the plain one (dpsql.execute.fetch_stored) would point at the older answer."""
    from dpsql.execute import auto_bounds

    plan = planning.plan(engine, prepared, session, ())
    pend = auto_bounds.pending(engine, prepared, session, plan.analysis)
    if not pend.needed:
        return cache_key(engine, prepared, plan, ())
    key = auto_cache_key(engine, prepared, plan, (), session.mechanism)
    if pend.missing:
        pend = auto_bounds.with_fallbacks(engine, prepared, session, pend, plan.epsilon)
    return key if pend.missing else bounds_key(engine, session, key, pend.known)


def slot(engine: EngineContext, session: SessionContext, key: str) -> str:
    """The in-flight slot of a repeat key: an identical statement whose release this one may
    read (the same analyst's, or any analyst's with ``repeats: global``) waits for it. Another
    analyst's is never read, so waiting for it would only tell this one that it runs (and when
    it ends)."""
    return key if engine.policy.repeats == "global" else f"{session.analyst}\x1f{key}"
