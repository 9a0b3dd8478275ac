"""The notices of a released result, in the analyst's words: which output columns carry no
``_low``/``_high`` interval and what they carry instead, and the accuracy guarantee of a quantile
or a mode (also in EXPLAIN's plan, :mod:`dpsql.explain.report`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from fractions import Fraction
from typing import Any

from sqlglot import exp

from dpsql.dp.quantiles import Mode, Quantile
from dpsql.execute.accuracy_words import ESTIMATE_SHARE, level_text
from dpsql.execute.bounds_text import fmt, rows_kept
from dpsql.execute.declared_text import declared_premise, warned
from dpsql.execute.disowned import (
    capped_expression,
    capped_quantile,
    left_out_counted,
    nulled,
    quantile_disown,
)
from dpsql.execute.selected_measures import clear_rows, quantile_level
from dpsql.sql.analysis import Analysis
from dpsql.sql.bias import bias_targets, end_rows
from dpsql.sql.grouping_sets import SetsPlan
from dpsql.sql.intervals import derived_outputs
from dpsql.sql.plan import Plan
from dpsql.sql.post_guards import guard_note, has_guard
from dpsql.sql.postprocess import stat_outputs
from dpsql.sql.wording import plural


def plan_words(
    a: Analysis, plan: Plan | SetsPlan, confidence: float, notes: Sequence[str] = ()
) -> dict[int, str]:
    """Each quantile's and mode's words (by statistic index), after its head: what its plan
    (bounds, rank error, grid) makes of it; stored with the release for its free repeats."""
    out: dict[int, str] = {}
    for si, s in enumerate(a.statistics):
        if s.func == "quantile":
            premise = "" if warned(s, notes) else declared_premise(a, s)
            note = quantile_note(plan, s, confidence)
            cover = quantile_cover(plan, s, confidence)
            end = f". {premise}" if premise else ("." if cover else "")
            out[si] = f"{note}{end}{cover}"
        elif s.func == "mode":
            out[si] = f"no value interval; {selection_accuracy(plan, s, confidence)}"
    return out


def interval_notices(
    a: Analysis,
    plan: Plan | SetsPlan | None,
    confidence: float,
    notes: Sequence[str] = (),
    told: Mapping[int, str] | None = None,
    none: Collection[int] = (),
) -> tuple[str, ...]:
    """Which output columns carry no ``_low``/``_high`` interval, and what they carry instead.
    ``notes``: the release's (a quantile's outside warning there replaces its premise here);
    ``told``: the words its release was given (:func:`plan_words`: a free repeat's); ``none``:
    the statistics NULL in every row (their notice says why): their words say first that no row
    has the interval they describe (newcomer27 #12: "MEDIAN(income) (column med): the interval
    holds the median ..." after "MEDIAN(income) is NULL in 2 of 2 groups, with its _low/_high
    interval columns"; what they say of its rank error and share still tells what would answer).
    """
    words = (
        told
        if told is not None
        else plan_words(a, plan, confidence, notes)
        if plan is not None
        else {}
    )
    direct = dict(stat_outputs(a))
    with_interval = {pos for pos, _, _ in derived_outputs(a)}
    names = [e.alias_or_name for e in a.outer.expressions]
    keys = {f"_dp_g{i}" for i in range(len(a.group_keys))}
    out: list[str] = []
    derived = []
    for pos, item in enumerate(a.outer.expressions):
        body = item.this if isinstance(item, exp.Alias) else item
        if pos in direct:
            s = a.statistics[direct[pos]]
            if direct[pos] in words:
                what = words[direct[pos]]
                if direct[pos] in none and s.func == "quantile":
                    what = (
                        "NULL in every row (as said above), so no row has the interval this "
                        f"describes; where answered, {what}"
                    )
                out.append(f"{_head(s.sql, item)}: {what}")
        elif (
            pos not in with_interval
            and _noisy(body)
            and not (isinstance(body, exp.Column) and body.name in keys)
        ):
            derived.append(names[pos])
    if derived:
        out.append(
            f"{', '.join(derived)}: computed from noisy statistics by an expression dpsql can't "
            "bound, no interval is reported (ask for the statistics themselves to get theirs)"
        )
    return tuple(out)


def null_everywhere(a: Analysis, stats: Sequence[Sequence[object]]) -> set[int]:
    """The statistics whose value is NULL in every row of a release (none without a row)."""
    return {si for si in range(len(a.statistics)) if stats and all(r[si] is None for r in stats)}


def guard_notices(
    a: Analysis,
    rows: Sequence[Sequence[object]],
    withheld: Callable[[int, int], bool] | None = None,
) -> tuple[str, ...]:
    """Why an output is NULL in some row: a guarded operation over a noisy value
    (:mod:`dpsql.sql.post_guards`) met a value where it is undefined. ``withheld(row, pos)``:
    whether that NULL is a withheld statistic's instead (its own words say so:
    :mod:`dpsql.execute.withheld_words`)."""
    guarded = [pos for pos, item in enumerate(a.outer.expressions) if has_guard(item)]

    def undefined(r: int, p: int) -> bool:
        row = rows[r]
        return p < len(row) and row[p] is None and not (withheld is not None and withheld(r, p))

    null_rows = [r for r in range(len(rows)) if any(undefined(r, p) for p in guarded)]
    names = [
        a.outer.expressions[p].alias_or_name
        for p in guarded
        if any(undefined(r, p) for r in null_rows)
    ]
    return (guard_note(names, len(null_rows), len(rows)),) if names else ()


def _head(sql: str, item: exp.Expr) -> str:
    """A quantile's or mode's notice starts with the aggregate as the user wrote it, as every
    other statistic's does (``MEDIAN(income)``, not the column label ``median``), and names its
    column when the user gave it one (``MEDIAN(age) (column m)``: its _low/_high columns)."""
    if isinstance(item, exp.Alias) and item.args.get("alias") is not None:
        name = item.alias
        if name and not name.startswith("_dp") and name.lower() != sql.split("(", 1)[0].lower():
            return f"{sql} (column {name})"
    return sql


def _noisy(node: exp.Expr) -> bool:
    """True when an output reads a noisy statistic (keys and GROUPING() are exact)."""
    return any(c.name.startswith("_dp_s") for c in node.find_all(exp.Column))


def _target(q: float) -> str:
    """The quantile a statistic aims at, in words."""
    if q == 0.5:
        return "median"
    if q == 1:
        return "largest value"
    if q == 0:
        return "smallest value"
    return f"{q:g} quantile"


def quantile_note(plan: Plan | SetsPlan, s: Any, conf: float) -> str:
    """What a quantile's interval means (dpsql.execute.selected_measures.quantile_ends), in words."""
    mp = plan.measure_plan(s.measures[0])
    level = quantile_level(mp)
    mech = mp.mechanism
    what = _target(float(mech.quantile)) if isinstance(mech, Quantile) else "quantile"
    # the level in the words every accuracy line uses ('95% interval'), as its columns hold
    unclear = (
        _no_clear_estimate(plan.analysis, mech, conf, what) if isinstance(mech, Quantile) else ""
    )
    if conf > level:
        return (
            f"no {level_text(conf)} interval (its interval holds at {level_text(level)} only: "
            f"SET dpsql.confidence = {level:.4g} or less); {selection_accuracy(plan, s, conf)}"
            + unclear
        )
    rows = (
        "all the rows (as below)"
        if isinstance(plan, Plan) and left_out_counted(plan.analysis, s)
        else "the rows the contribution bounds keep"
    )
    return (
        f"the interval holds the {what} of {rows} with "
        f"probability {level_text(conf)} or more (at {level_text(level)}: it comes from two more "
        f"selections aimed past it, with {_ends_share(mp, 2)} of its budget); "
        f"{selection_accuracy(plan, s, conf)}" + _why_wider(mp, what) + unclear
    )


def _no_clear_estimate(a: Analysis, mech: Quantile, conf: float, what: str) -> str:
    """Where a quantile's answer says nothing clear, in words that hold whatever the data
    (newcomer22 #11: medians by diagnosis at epsilon 0.3 answered 2,609.9 against a truth of
    181.4, above the table's 99th percentile, in groups of about 2,850 rows with a rank error of
    2,414, while the notice blamed its NULL columns on the bounds alone). The q quantile's
    answer is informative only when its rank error t is smaller than the rows on its nearer
    side, q n or (1 - q) n: a group of fewer than t / min(q, 1 - q) rows gets noise, anywhere in
    the group's range. MIN and MAX: every value beyond the extreme ranks the same as it, so the
    answer may land anywhere between it and the declared bound, or the nearer bound the WHERE
    clause puts on the column (:mod:`dpsql.sql.quantile_range`), at any epsilon. The group's size
    is not released here: the threshold is stated, in rows, for the reader to compare. Those are
    the rows the contribution bounds keep (the rank error is in them), fewer than a group's
    rows in the table where a unit has more than R there: the words say so, as the reader
    compares with a COUNT(*) of the group (nullmed24: 5,000 rows in the table, 2,000 kept,
    against a threshold of 3,668 reads as clear)."""
    q = float(mech.quantile)
    side = min(q, 1 - q)
    if side <= 0:
        far, beyond = ("largest", "above") if q == 1 else ("smallest", "below")
        return (
            f". Every value {beyond} the {far} one ranks as it does, so the answer may lie "
            f"anywhere between the {far} value and the column's declared bound (or the WHERE "
            "clause's bound on it, where nearer), at any epsilon: "
            f"for a figure that says more, ask for PERCENTILE_CONT({'0.99' if q == 1 else '0.01'}) "
            "WITHIN GROUP (ORDER BY ...)"
        )
    n = clear_rows(mech, conf)
    assert n is not None
    unit = a.private.privacy_unit
    kept = (
        ""
        if a.one_row_per_unit or a.unique_unit
        else f" kept by the contribution bounds ({rows_kept(a)}; a COUNT(*) of the group counts "
        f"all its rows, more where a {unit} has more, so it can pass this number while the kept "
        "rows do not)"
    )
    return (
        f". A group of fewer than {plural(n, 'row')}{kept} gets no clear estimate: that rank error "
        f"reaches past the rows on one side of its {what}, so its answer would be the noise of "
        f"the selection, anywhere in the group's range, not the {what} of the data. Where a noisy "
        "count of those rows (a tenth of its budget) comes out below that number, its answer "
        "and its interval columns are NULL (raise dpsql.epsilon, or group less finely)"
    )


_SHARES = {
    Fraction(1, 2): "half",
    Fraction(1, 4): "a quarter",
    Fraction(1, 5): "a fifth",
    Fraction(2, 5): "two fifths",
}


def _ends_share(mp: Any, ends: int) -> str:
    """The share of a quantile's budget ``ends`` of its interval ends get, in words (a fifth
    each beside the count of :func:`dpsql.execute.selected_measures.unclear_groups`, a quarter
    each for MIN and MAX: dpsql.sql.plan)."""
    total = sum(Fraction(c.epsilon) for c in mp.costs)
    part = ends * Fraction(mp.bounds[0].epsilon) / total if total else Fraction(0)
    return _SHARES.get(part, f"{float(part):.0%}")


def _why_wider(mp: Any, what: str) -> str:
    """Why a quantile's interval is much wider than the answer's rank error (newcomer21 #30:
    'within 348 rows of the median's' beside an interval of ages 9 to 91): each end is its own
    selection, at a quarter of the budget, aimed k rows past the target so that it misses at
    most QUANTILE_END_ALPHA, and may land further out still; a side with fewer than about k rows
    ends at the declared bound. k is the plan's (public) offset."""
    if not mp.bounds:
        return ""
    k = max(abs(b.offset) for b in mp.bounds)
    return (
        f". Its interval is wider than that: each end is a selection of its own, with "
        f"{_ends_share(mp, 1)} of the budget, aimed {plural(k, 'row')} past the {what} on its side (so that it lies "
        f"beyond it with probability 99.75%), and it may land further out; where fewer rows than "
        "that lie on a side, that end is the column's declared bound. More rows in the group or "
        "a larger dpsql.epsilon narrow it"
    )


def quantile_cover(plan: Plan | SetsPlan, s: Any, conf: float) -> str:
    """Whether a quantile's interval holds the truth, the quantile of all the rows, and which
    of its columns are NULL where it does not (:func:`dpsql.execute.disowned.quantile_disown`,
    the same rule the release applies to the columns); '' where it holds or there is none."""
    mp = plan.measure_plan(s.measures[0])
    mech = mp.mechanism
    q = float(mech.quantile) if isinstance(mech, Quantile) else 0.5
    a = plan.analysis
    d = quantile_disown(a, q, s)
    if conf <= quantile_level(mp) and left_out_counted(a, s):
        return left_out_words(plan, s)
    if d is None or conf > quantile_level(mp):
        return ""
    what = _target(q) if isinstance(mech, Quantile) else "quantile"
    capped, ranked = capped_quantile(a, s), capped_expression(a, s)
    if capped is not None or ranked is not None:
        name = capped or ranked or ""
        col = a.private.columns.get(name)
        cap = fmt(float(col.bounds[1])) if col is not None and col.bounds else "its cap"  # type: ignore[arg-type]
        unit = a.private.privacy_unit
        before = (
            f" But each {unit}'s {name} is capped at {cap} before it (a {unit} with more "
            f"counts as {cap})"
        )
        if capped is None:  # an expression of it: the cap can move that either way
            return (
                f"{before}, and it ranks a value computed from the capped one: the cap can "
                f"move that {what} either way, so it does NOT cover the {what} of the true "
                "values." + nulled(a, d)
            )
        return (
            f"{before}: the {what} of the capped values is at most the true one, and the same "
            f"below {cap}, so it does NOT cover a {what} above {cap}." + nulled(a, d)
        )
    way = ""
    if d.keep != "none":
        way = " (leaving rows out can only " + (
            "raise the smallest value)" if q == 0 else "lower the largest value)"
        )
    return (
        f" The bounds may leave rows out (they keep {rows_kept(a)}), so it does NOT cover "
        f"the {what} of all the rows{way}." + nulled(a, d)
    )


def left_out_words(plan: Plan | SetsPlan, s: Any) -> str:
    """How a quantile's interval allows for the rows its bounds leave out
    (:func:`dpsql.execute.selected_measures.quantile_ends`), in words."""
    a = plan.analysis
    t = next(t for t in bias_targets(a) if t.key == s.measures[0])
    unit = a.private.privacy_unit
    what = _target(float(t.measure.quantile or 0))
    e = end_rows(a, t.measure)
    return (
        f" The bounds may leave rows out (the answer ranks {rows_kept(a)}): its ends rank up "
        f"to {plural(e, 'row')} per {unit}{' in a group' if a.group_keys else ''} and are moved "
        "past the rows a noisy count says lie "
        f"beyond that (it gets {ESTIMATE_SHARE} of epsilon), so it covers the {what} of all "
        f"the rows, assuming no {unit} has more than {plural(e + t.group_cap_steps, 'row')}"
        f"{' in a group' if a.group_keys else ''}."
    )


def _width(s: Any, w: float) -> str:
    """A bucket's width in the statistic's own unit: days for a date, seconds for a timestamp
    (its quantile is of the epoch number, dpsql.sql.analyze_quantiles)."""
    t = str(getattr(s, "pg_type", ""))
    if t == "date":
        return plural(w, "day")
    if t.startswith("timestamp"):
        return plural(w, "second")
    return f"{w:.4g}"


SHARED_BELOW = 0.75
"""A quantile whose measures get less than this share of its statement's answer epsilon (the
other aggregates beside it hold the rest) says so, and how much tighter it is asked alone."""


def _shared(plan: Plan | SetsPlan, mp: Any) -> str:
    """Where a quantile shares its statement's epsilon with other aggregates, how much of it it
    had and what asking it alone gives (newcomer23 #22: a STDDEV, three measures, beside a
    median took 3/4 of the budget, the median's rank error 8,043 rows where alone it was
    2,012). Its rank error is about inversely proportional to its epsilon (the selection's
    utility guarantee). Pure plans only (a Gaussian part's rho is no share of epsilon)."""
    if not isinstance(plan, Plan):
        return ""
    costs = [c for m in plan.measures for c in m.costs]
    if any(c.rho for c in costs):
        return ""
    total = sum((c.epsilon for c in costs), Fraction(0))
    own = sum((c.epsilon for c in mp.costs), Fraction(0))
    if total <= 0 or own <= 0 or own / total >= SHARED_BELOW:
        return ""
    return (
        f" (it has {float(own / total):.0%} of this statement's epsilon for its answer, the "
        "other aggregates beside it the rest: asked in a statement of its own it gets all "
        f"of it, a rank error about {float(total / own):.2g}x smaller)"
    )


def selection_accuracy(plan: Plan | SetsPlan, s: Any, conf: float) -> str:
    """The accuracy guarantee of a quantile or mode statistic, in words."""
    mp = plan.measure_plan(s.measures[0])
    mech = mp.mechanism
    if isinstance(mech, Quantile):
        t = mech.rank_error(conf)
        what = _target(float(mech.quantile))
        return (
            f"with probability {level_text(conf)} the answer's rank is within {plural(math.ceil(t), 'row')} of the "
            f"{what}'s in its group, to the nearest bucket ({_width(s, float(mech.width))} wide)"
            + _shared(plan, mp)
        )
    assert isinstance(mech, Mode)
    n = len(mp.measure.candidates) if mp.measure.candidates else None
    g = mech.count_error(conf, n) if n else None
    within = (
        plural(math.ceil(g), "row")
        if g is not None
        else "2R ln(values / (1 - confidence)) / epsilon rows (R: rows kept per unit)"
    )
    return (
        f"with probability {level_text(conf)} the answer's row count is within {within} of the "
        "most "
        "frequent value's"
    )
