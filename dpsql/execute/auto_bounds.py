"""Choosing a statement's ``auto`` contribution bounds: reuse stored ones, measure the rest.

Per bound (:func:`dpsql.sql.auto_bounds.auto_items`), the ledger may already hold the choice an
earlier statement over the same slice made (:meth:`Ledger.peek`: free, read only). The missing
ones are chosen together: the statement's epsilon times ``AUTO_SHARE``, split evenly, is
reserved per bound (a release each, history mechanism ``auto_bound``), in the same ledger
transaction as the statement's answer (the rest of its epsilon): a statement the budget can't
hold whole is refused before any data is read and charged nothing; one SQL counts units per
bucket (:mod:`dpsql.sql.rewrite.measure_bounds`); :class:`dpsql.dp.bounds.TopRank` chooses; each
choice is committed with its payload, so later statements reuse it free (``repeats: off``:
nothing is stored, every statement chooses again and pays). The statement itself then runs at
its epsilon minus what was spent here: its total charge is the epsilon it asked for.

Failures follow the private path's rule: a failure before any data was read is refunded, one
that may depend on the data (a timeout) stays charged.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from dpsql.budget.records import before_the_data
from dpsql.dp.bounds import COUNT_SHARE, Selection, TailRank, TopRank, default_rank
from dpsql.dp.noise_source import NoiseSource
from dpsql.dp.quantiles import round_down
from dpsql.execute import own_sql
from dpsql.execute.backend import CancelToken
from dpsql.execute.prepared import PrivateQuery
from dpsql.execute.unique_units import still_unique
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis
from dpsql.sql.apply_bounds import apply_bounds
from dpsql.sql.auto_bound_types import AutoBounds, AutoItem, ChosenBound
from dpsql.sql.auto_bounds import (
    AUTO_SHARE,
    auto_items,
    declared_groups,
    policy_choices,
    whole_table_rows,
    wider_value,
)
from dpsql.sql.join_cap import fallback_note
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.rewrite.measure_bounds import measure_bounds

if TYPE_CHECKING:
    from dpsql.budget.api import ReleasePart
    from dpsql.budget.records import Reservation
    from dpsql.execute.context import EngineContext


@dataclass(frozen=True)
class Pending:
    """The bounds a statement needs: those known without spending, and those to measure."""

    known: AutoBounds
    missing: tuple[AutoItem, ...]
    # the table's rows per unit over all its rows, stored by an earlier statement
    # (dpsql.sql.auto_bounds.whole_table_rows): what a choice the guard refuses keeps instead
    # of the defaults; None when none is stored
    wider: Fraction | None = None

    @property
    def needed(self) -> bool:
        return bool(self.known.chosen or self.missing or self.known.fallback)


def payload(c: ChosenBound) -> bytes:
    d: dict[str, object] = {
        "kind": c.kind,
        "column": c.column,
        "value": str(c.value),
        "epsilon": str(c.epsilon),
        "rank": c.rank,
        "buckets": c.buckets,
    }
    if c.fallback:
        d["fallback"] = True
    if c.wider:
        d["wider"] = True
    return json.dumps(d, separators=(",", ":")).encode()


def from_payload(raw: bytes) -> ChosenBound:
    d = json.loads(raw)
    return ChosenBound(
        d["kind"], d["column"], Fraction(d["value"]), Fraction(d["epsilon"]),
        int(d["rank"]), int(d["buckets"]), reused=True, fallback=bool(d.get("fallback")),
        wider=bool(d.get("wider")),
    )  # fmt: skip


def fallback_key(key: str, epsilon: Fraction) -> str:
    """The ledger key of a choice that fell back to its default at ``epsilon`` (the guard's
    noisy count of units said too few): reused only at that same epsilon (a retry of the
    statement), as a larger one may choose."""
    return f"{key}:fallback@{epsilon}"


def with_fallbacks(
    engine: EngineContext, prepared: PrivateQuery, session: SessionContext, p: Pending,
    epsilon: Fraction,
) -> Pending:  # fmt: skip
    """``p`` with the missing bounds whose choice fell back to its default at this statement's
    epsilon for each (stored by an earlier run of it: a cancelled statement's retry) taken as
    known: the guard's outcome is a release already charged; asking it again at the same
    epsilon would charge the retry for what it was told (newcomer21 #8). Nothing found: ``p``."""
    ledger = engine.ledger
    if not p.missing or ledger is None:
        return p
    # the share each bound had when it was chosen: the slice split among the bounds missing
    # then; an earlier run of this statement may have stored some of today's known ones since
    # (a choice that succeeded beside a fallback), so it split among up to that many more.
    # A fallback is reused only at the exact share it was released (and charged) at.
    stored = sum(1 for c in p.known.chosen if c.reused)
    whole = slice_epsilon(epsilon, p)
    shares = [whole / k for k in range(len(p.missing), len(p.missing) + stored + 1)]
    digest = engine.repeat_digest(prepared.scope)
    found: list[ChosenBound] = []
    missing = []
    for it in p.missing:
        raw = next(
            (r for each in shares
             if (r := ledger.peek(session.analyst, fallback_key(it.key(digest), each)))),
            None,
        )  # fmt: skip
        if raw is None:
            missing.append(it)
            continue
        c = from_payload(raw)
        if not c.wider and p.wider is not None:  # the table's R stored since: it fits better
            c = replace(wider_bound(it, p.wider), epsilon=c.epsilon, rank=c.rank, reused=True)
        found.append(c)
    if not found:
        return p
    known = AutoBounds((*p.known.chosen, *found), fallback=p.known.fallback)
    return Pending(known, tuple(missing), p.wider)


def pending(
    engine: EngineContext, prepared: PrivateQuery, session: SessionContext, a: Analysis
) -> Pending:
    """What ``a`` needs, with the stored choices filled in (reads the ledger, spends nothing).

    A stored choice is kept in the engine's memo once read: the ledger's answers are append-only
    (inserted once, never updated or deleted) and keyed by the policy's digest, so the memo
    holds exactly what reading the ledger again would return. A missing one is read each time.
    """
    stable = prepared.is_own(a)  # its items are memoized per statement
    memo = engine.caches.sql
    # keyed by the analysis itself, not the text alone: the same text prepared under another
    # analyst's view (a denied keys_from table) has another analysis
    items_key = ("auto_items", prepared.text, id(a))
    hit = memo.get(items_key) if stable else None
    if hit is not None and hit[0] is a:
        items = hit[1]
    else:
        items = auto_items(a)
        if stable:
            memo.remember(items_key, (a, items))  # holds ``a``: its id can't be reused meanwhile
    chosen = list(policy_choices(a))
    missing = []
    ledger = engine.ledger
    digest = engine.repeat_digest(prepared.scope)
    for it in items:
        key = it.key(digest)
        bound: ChosenBound | None = memo.get(("auto_bound", session.analyst, key))
        if bound is None and ledger is not None:
            raw = ledger.peek(session.analyst, key)
            if raw is not None:
                bound = from_payload(raw)  # frozen: kept as read
                memo.remember(("auto_bound", session.analyst, key), bound)
        if bound is None:
            missing.append(it)
        else:
            chosen.append(bound)
    wider = _whole_table_rows(engine, prepared, session, a) if missing else None
    return Pending(AutoBounds(tuple(chosen), fallback=fallback_note(a)), tuple(missing), wider)


def _whole_table_rows(
    engine: EngineContext, prepared: PrivateQuery, session: SessionContext, a: Analysis
) -> Fraction | None:
    """The table's rows per unit over all its rows as stored by an earlier statement (its
    ``SELECT COUNT(*) FROM t``: :func:`dpsql.sql.auto_bounds.whole_table_rows`), read from the
    memo or the ledger (the analyst's own stored releases: nothing spent); None when none is."""
    ledger = engine.ledger
    if ledger is None:
        return None
    memo = engine.caches.sql
    digest = engine.repeat_digest(prepared.scope)
    for it in whole_table_rows(a):
        key = it.key(digest)
        bound: ChosenBound | None = memo.get(("auto_bound", session.analyst, key))
        if bound is None:
            raw = ledger.peek(session.analyst, key)
            if raw is None:
                continue
            bound = from_payload(raw)
            memo.remember(("auto_bound", session.analyst, key), bound)
        if not bound.fallback:
            return bound.value
    return None


def default_bound(it: AutoItem) -> ChosenBound:
    """The bound ``it`` keeps when too few units choose it (:func:`choose`'s guard): 1 row, 1
    group, the declared range, a cap of one row's worth over all groups (as R = G = 1)."""
    value = it.grid[-1] if it.kind.startswith("value") else Fraction(1)
    if it.kind == "total" and it.measure is not None:
        value = it.measure.per_row()
    return ChosenBound(it.kind, it.column, value, Fraction(0), 0, len(it.grid), fallback=True)


def wider_bound(it: AutoItem, rows: Fraction | None) -> ChosenBound:
    """The bound ``it`` keeps when too few units choose it: from the table's rows per unit over
    all its rows when one is stored (``rows``: :func:`dpsql.sql.auto_bounds.wider_value`, a
    released value: post-processing), else :func:`default_bound`."""
    c = default_bound(it)
    value = wider_value(it, rows) if rows is not None else None
    if value is None or value <= c.value:
        return c
    return replace(c, value=value, wider=True)


def with_defaults(p: Pending) -> AutoBounds:
    """The known bounds with each missing one at its default (:func:`default_bound`): what
    EXPLAIN plans with before the statement chooses them (nothing chosen, nothing spent)."""
    return AutoBounds((*p.known.chosen, *map(default_bound, p.missing)), fallback=p.known.fallback)


UNTIL_CHOSEN = (
    "at the default bounds shown (not the statement's: it depends on the bounds chosen when it "
    "runs)"
)
"""EXPLAIN's note beside an error planned with :func:`with_defaults`."""


def slice_epsilon(epsilon: Fraction, p: Pending) -> Fraction:
    """What choosing the missing bounds costs out of a statement's ``epsilon``."""
    return epsilon * AUTO_SHARE if p.missing else Fraction(0)


def mechanisms(p: Pending, epsilon: Fraction) -> list[Selection]:
    """The selection of each missing bound: ``slice_epsilon(epsilon)`` split evenly (a clamp's
    target rank as when nothing else is chosen: :func:`choose` may aim it lower)."""
    if not p.missing:
        return []
    each = slice_epsilon(epsilon, p) / len(p.missing)
    return [item_mechanism(it, each, 0) for it in p.missing]


def item_mechanism(it: AutoItem, each: Fraction, at_least: int, balance: int = 1) -> Selection:
    if it.median:
        return TopRank(each, 10**9, Fraction(1, 2), step_nats=it.prior)  # the median unit
    if (it.kind == "rows" and not it.per_group) or it.kind == "total":
        # R over all of a unit's rows, or an L1 cap over its groups: its best rank
        # (``balance``) lies far below what one selection resolves; the tail's slope between
        # two ranks says how far to go past it
        s = round_down(each * (1 - COUNT_SHARE))
        k2 = default_rank(round_down(s / 2), len(it.grid))  # each of two selections'
        k1 = default_rank(s, len(it.grid))  # one selection's, when too few units for two
        return TailRank(each, max(k2, at_least), balance, max(k1, at_least), step_nats=it.prior)
    k = default_rank(round_down(each * (1 - COUNT_SHARE)), len(it.grid))  # the selection's
    if it.kind.startswith("value") and 0 < balance < k:
        # a clamp whose balance lies below what one selection resolves (AVG, or SUM without
        # GROUP BY): along the tail of the units' largest values, as R over all rows
        s = round_down(each * (1 - COUNT_SHARE))
        k2 = default_rank(round_down(s / 2), len(it.grid))
        return TailRank(each, max(k2, balance), balance, k, slope_min=1)
    return TopRank(each, max(k, at_least), step_nats=it.prior)


def _balance(a: Analysis, epsilon: Fraction, per_row: int) -> int:
    """Units a bound may leave above it: the bias-variance balance of Amin et al. (ICML 2019).

    Raising a bound by one step (a row for R, dc for a clamp) moves each group's noise by about
    sqrt(2) G x / epsilon_m (x = 1 row for R, R dc for a clamp: a unit adds up to G R values
    over its groups), and each group's bias by one step per unit above the bound in that group:
    about 1/K of those above it over all K groups. The optimum leaves about
    sqrt(2) G K x / epsilon_m above (in units: at least that many rows). K is the number of
    declared key combinations, or G when the keys are not declared (K >= G: the smaller rank,
    the higher bound, less bias), 1 without GROUP BY. A function of the R and G in force, the
    grouping and epsilon: public.
    """
    eps_m = epsilon / max(1, len(a.measures))
    if eps_m <= 0:
        return 0
    k = (declared_groups(a) or a.max_groups) if a.grouped else 1
    return math.ceil(math.sqrt(2) * a.max_groups * k * per_row / float(eps_m))


def clamp_rank(a: Analysis, epsilon: Fraction) -> int:
    """Units a clamp may leave above it given R, G and each measure's epsilon (:func:`_balance`
    with x = R: raising the clamp by dc moves a group's noise by sqrt(2) G R dc / epsilon_m)."""
    return _balance(a, epsilon, a.max_rows)


def total_rank(a: Analysis, epsilon: Fraction) -> int:
    """Units an L1 cap over groups may leave above it (:func:`_balance` with G·x = 1: raising
    the cap by dL moves each group's noise by sqrt(2) dL / epsilon_m, whatever G)."""
    eps_m = epsilon / max(1, len(a.measures))
    if eps_m <= 0:
        return 0
    k = (declared_groups(a) or a.max_groups) if a.grouped else 1
    return math.ceil(math.sqrt(2) * k / float(eps_m))


def row_rank(a: Analysis, epsilon: Fraction) -> int:
    """Units R may leave above it given G (:func:`_balance` with x = 1 row: a COUNT's; for a
    SUM a row above R weighs at most the clamp, so this errs towards a higher R, less bias).
    Matters per group: without GROUP BY it is far below the rank the selection can resolve."""
    return _balance(a, epsilon, 1)


def choose(
    a: Analysis,
    p: Pending,
    hist: list[np.ndarray],
    epsilon: Fraction,
    noise: NoiseSource,
) -> list[tuple[ChosenBound, Selection]]:
    """Each missing bound's choice (in ``p.missing`` order) and the mechanism that made it: G
    first, then R aimed at :func:`row_rank` for the G in force, then the L1 caps over groups
    (:func:`total_rank`), then the clamps, aimed at
    :func:`clamp_rank` for the R and G in force (post-processing of the earlier choices: each
    choice's privacy does not depend on its target rank)."""
    each = slice_epsilon(epsilon, p) / len(p.missing)
    rest = epsilon - slice_epsilon(epsilon, p)
    out: dict[int, tuple[ChosenBound, Selection]] = {}

    def pick(i: int, it: AutoItem, m: Selection) -> None:
        idx = noise.bound(m, hist[i])
        if idx >= len(it.grid):  # the guard: too few units to choose reliably at this epsilon
            c = replace(wider_bound(it, p.wider), epsilon=each, rank=m.rank)
        else:
            c = ChosenBound(it.kind, it.column, it.grid[idx], each, m.rank, len(it.grid))
        out[i] = (c, m)

    def in_force() -> Analysis:
        return apply_bounds(a, AutoBounds((*p.known.chosen, *(c for c, _ in out.values()))))

    for kind in ("groups", "rows", "total"):
        for i, it in enumerate(p.missing):
            if it.kind == kind:
                rank = {"rows": row_rank, "total": total_rank}.get(kind)
                at_least = rank(in_force(), rest) if rank is not None else 0
                pick(i, it, item_mechanism(it, each, at_least, at_least))
    k = clamp_rank(in_force(), rest)
    for i, it in enumerate(p.missing):
        if i not in out:
            pick(i, it, item_mechanism(it, each, k, k))
    return [out[i] for i in range(len(p.missing))]


def histograms(
    engine: EngineContext,
    a: Analysis,
    items: tuple[AutoItem, ...],
    cancel: CancelToken | None = None,
    fingerprint: str = "",
) -> list[np.ndarray]:
    """Units per bucket of each item's grid, counted by PostgreSQL (private rows stay there).

    When the catalog proved one row per unit (``a.unique_unit``), the SQL reads each unit's
    numbers off its row, with no grouping (:mod:`dpsql.sql.rewrite.measure_bounds`): the proof
    is read again just before and just after it runs (as for the private query:
    :func:`dpsql.execute.unique_units.still_unique`), so no unit is counted twice."""
    # clamped whatever the catalog proves of the values (proven_bounds): that proof is read
    # again only for the answer's own SQL (dpsql.engine.Engine.checked_sql)
    with before_the_data():  # nothing read yet: a refusal here is refunded (55000)
        sql = measure_bounds(replace(a, proven_bounds=()), items).sql(POSTGRES)
        still_unique(engine.backend, a, "while contribution bounds were being planned")
    what = "choosing its contribution bounds"  # a Parse failure of it is dpsql's (own_sql)
    rows = own_sql.run(engine.backend, sql, fingerprint, cancel=cancel, what=what).rows
    still_unique(engine.backend, a, "while contribution bounds were being chosen")
    hist = [np.zeros(len(it.grid), dtype=np.int64) for it in items]
    for item, bucket, count in rows:
        b = min(max(int(bucket), 0), len(hist[int(item)]) - 1)
        hist[int(item)][b] += int(count)
    return hist


def measure(
    engine: EngineContext,
    prepared: PrivateQuery,
    session: SessionContext,
    a: Analysis,
    p: Pending,
    epsilon: Fraction,
    cancel: CancelToken | None = None,
    answer: ReleasePart | None = None,
) -> tuple[AutoBounds, Reservation | None]:
    """Choose the missing bounds at ``slice_epsilon(epsilon)`` (charged, stored) and return all,
    with the reservation of the statement's ``answer`` (its cost after the slice) when given.

    One statement, one charge: the bound choices and the answer are reserved together, in one
    ledger transaction, before any data is read (:meth:`Ledger.reserve_together`). Refused (the
    budget can't hold the whole statement), nothing is charged and nothing is read; admitted,
    no concurrent statement can take the budget the answer needs. The caller runs the answer
    under the returned reservation (:func:`dpsql.execute.private.run_private`) and refunds it
    if the answer's own mechanism never runs. None when nothing was reserved here (no ledger,
    or nothing to choose: the caller reserves the answer as usual).
    """
    if not p.missing:
        return p.known, None
    small = too_small(p, epsilon)
    if small is not None:
        return small, None
    mechs = mechanisms(p, epsilon)  # what each costs (the clamps' target rank comes later)
    ledger = engine.ledger
    reservations: list[Reservation] = []
    main: Reservation | None = None
    if ledger is not None:
        parts: list[ReleasePart] = [(m.cost, "auto_bound", None) for m in mechs]
        got = ledger.reserve_together(
            session.analyst,
            [*parts, *([answer] if answer is not None else [])],
            prepared.fingerprint,
            statement=prepared.text,
        )
        reservations = got[: len(mechs)]
        main = got[len(mechs)] if answer is not None else None
    try:
        bounds = choose_reserved(engine, prepared, a, p, epsilon, reservations, cancel)
    except BaseException as error:
        if ledger is not None and main is not None:
            # the answer's mechanism never ran, but a failure reading the rows (a data exception)
            # is itself a release: the whole statement stays charged (Ledger.refund's rule)
            ledger.refund(main, error)
        raise
    return bounds, main


def too_small(p: Pending, epsilon: Fraction) -> AutoBounds | None:
    """The bounds when ``epsilon``'s slice is below what the exact sampler can draw (today's
    defaults kept, nothing spent), else None."""
    if round_down(slice_epsilon(epsilon, p) / len(p.missing)) > 0:
        return None
    wider = tuple(c for c in (wider_bound(it, p.wider) for it in p.missing) if c.wider)
    kept = (
        "the table's rows per unit over all its rows (chosen earlier, reused free) bound the "
        "rows and groups of one unit"
        if wider
        else "1 row and 1 group per unit are kept"
    )
    note = (
        f"epsilon {float(epsilon):.3g} is too small to choose contribution bounds from the "
        f"data: {kept} and values clamped to the declared bounds"
    )
    return AutoBounds(
        (*p.known.chosen, *wider), Fraction(0), "; ".join(filter(None, [p.known.fallback, note]))
    )


def choose_reserved(
    engine: EngineContext,
    prepared: PrivateQuery,
    a: Analysis,
    p: Pending,
    epsilon: Fraction,
    reservations: list[Reservation],
    cancel: CancelToken | None = None,
) -> AutoBounds:
    """Choose ``p.missing`` under their reservations (one per item, made by the caller before
    any data was read: :func:`measure`, or a tree of DP leaves' one charge): count, choose,
    commit each with its payload (stored for later statements). A failure reading the data
    refunds or confirms the reservations (:meth:`Ledger.refund`'s rule)."""
    ledger = engine.ledger
    try:
        hist = histograms(engine, a, p.missing, cancel, prepared.fingerprint)
    except BaseException as error:
        if ledger is not None:
            for r in reservations:
                ledger.refund(r, error)  # charged when the failure may depend on the data
        raise
    chosen = list(p.known.chosen)
    digest = engine.repeat_digest(prepared.scope)
    picks = [c for c, _ in choose(a, p, hist, epsilon, engine.noise)]
    if ledger is not None:
        # every choice confirmed and stored in one ledger transaction (one that fell back to
        # its default under its own key, reused at that epsilon only: a larger one may choose)
        earlier = ledger.commit_many(
            [
                (r, fallback_key(it.key(digest), c.epsilon), payload(c))
                if c.fallback
                else (r, it.key(digest), payload(c))
                for r, it, c in zip(reservations, p.missing, picks, strict=True)
            ]
        )
        # a concurrent statement stored its choice first: use that one
        picks = [c if e is None else from_payload(e) for c, e in zip(picks, earlier, strict=True)]
    chosen += picks
    return AutoBounds(tuple(chosen), slice_epsilon(epsilon, p), p.known.fallback)
