"""The words of ``auto`` contribution bounds: the notice a statement sends (which bounds, how
they were chosen, what they cost, which fell back to their defaults) and EXPLAIN's line (what is
stored, what running would choose and spend), in the user's terms (the privacy unit's column
where they say "unit"). The choosing is :mod:`dpsql.execute.auto_bounds`'s."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from dpsql.dp.bounds import COUNT_SHARE, TailRank, integer_grid
from dpsql.dp.quantiles import round_down
from dpsql.execute.auto_bounds import Pending, item_mechanism, slice_epsilon
from dpsql.sql.analysis import Analysis
from dpsql.sql.auto_bound_types import (
    DECLARED,
    RATIO_ROWS,
    TOTAL_ROWS,
    AutoBounds,
    AutoItem,
    ChosenBound,
    total_label,
)
from dpsql.sql.auto_bounds import AUTO_SHARE, rows_ceiling, wider_value


def in_terms(text: str, unit: str) -> str:
    """A bounds text in the user's terms: the policy's privacy unit column (``user_id``) where
    it says "unit", as the accuracy notice does ("23 rows per user_id")."""
    if not unit or unit == "unit":
        return text
    text = re.sub(r"(?<!privacy )\bunits\b", f"{unit} values", text)
    return re.sub(r"(?<!privacy )\bunit\b", unit, text)


def notice(
    bounds: AutoBounds,
    epsilon: Fraction,
    stored: bool,
    unit: str = "unit",
    whose: str = "this statement's",
    a: Analysis | None = None,
    adds: tuple[str, ...] = (),
) -> str:
    """The notice a statement with ``auto`` bounds sends (which bounds, and what they cost);
    ``stored``: the ledger keeps choices for later statements; ``unit``: the privacy unit's
    column, the word the notice uses for one person; ``whose``: what ``epsilon`` is the budget
    of (a part of a statement of several aggregates: "this part's"); ``a``: the statement's
    analysis (G taken from its declared keys: why its noise is that large, :func:`keyed_groups`);
    ``adds``: the statistics whose column adds what the fixed defaults left out (the plan's
    ``BiasPlan.adds``)."""
    # an average, spread or quantile alone aims its rows per unit at the median unit: a
    # whole-table COUNT's stored rows per unit do not serve it (wider_value)
    ratios = a is not None and all(s.func in MEDIAN_AIMED for s in a.statistics)
    # nor a join's, nor one whose R is the policy's (no whole-table R is read for them:
    # whole_table_rows), nor when nothing is stored (repeats off, no ledger); a declared
    # per-unit total serves one table only (declared_total)
    one_table = a is None or not (a.joins or a.sources)
    serves = stored and one_table and bounds.get("rows") is not None
    advice = _whole_table(bounds, epsilon, a) if serves and a is not None else None
    text = _notice(bounds, epsilon, stored, whose, ratios, (serves, one_table), adds, advice)
    more = keyed_groups(bounds, a) if a is not None else ""
    return in_terms(f"{text}; {more}" if text and more else text, unit)


def _whole_table(bounds: AutoBounds, epsilon: Fraction, a: Analysis) -> tuple[bool, str]:
    """(whether this statement is itself the whole table's count, at this epsilon: the
    advice to run that count would point at itself; the words of how many units that count
    needs to choose, at this epsilon and at twice it: its guard, from public numbers only,
    :func:`dpsql.execute.auto_bounds.whole_table_units`)."""
    rows = bounds.get("rows")
    itself = (
        a.where is None
        and not a.group_keys
        and rows is not None
        and rows.fallback
        and rows.epsilon == epsilon * AUTO_SHARE  # its one bound: the whole count's slice
    )
    now, twice = whole_table_units(a, epsilon), whole_table_units(a, 2 * epsilon)
    if now is None or twice is None:
        return itself, ""
    return itself, (
        f"at epsilon {float(epsilon):.4g} it chooses them only where its noisy count of units "
        f"passes about {now:,}, at epsilon {float(2 * epsilon):.4g} about {twice:,}"
    )


def whole_table_units(a: Analysis, epsilon: Fraction) -> int | None:
    """The noisy count of units ``SELECT COUNT(*)`` over ``a``'s whole table needs at
    ``epsilon`` to choose its rows per unit (its guard's limit, :meth:`TailRank.limit`: public
    numbers of the policy and epsilon, no data); None when its slice is too small to count."""
    each = epsilon * AUTO_SHARE  # its one bound takes the whole slice
    if round_down(each * COUNT_SHARE) <= 0:
        return None
    grid = tuple(Fraction(v) for v in integer_grid(rows_ceiling(a)))
    it = AutoItem("rows", grid, "", per_group=False)
    at_least = math.ceil(math.sqrt(2) / float(epsilon - each))  # row_rank: one COUNT, G = 1
    m = item_mechanism(it, each, at_least, at_least)
    return m.limit(len(grid)) if isinstance(m, TailRank) else None


def keyed_groups(bounds: AutoBounds, a: Analysis) -> str:
    """Why a GROUP BY of declared keys is noisy, and what fixes it: ``auto`` takes G, the groups
    one unit may touch, as the number of key combinations (free, nothing dropped: every unit
    could be in every group as far as the public policy says), so a per-group answer's noise
    is sized for one unit in all of them: 16x one group's for GROUP BY educ of 16 keys, however
    few a unit really has. Only the data owner can say a unit has fewer (the policy is public;
    choosing G from the data would cost epsilon and drop the groups of units above it).
    Nothing where G is 1, nor where no answer's noise depends on G (per-group COUNT and SUM
    under an L1 cap over groups: :func:`dpsql.sql.auto_bounds.total_mode`)."""
    g = bounds.get("groups")
    if g is None or g.rule != DECLARED or g.value <= 1:
        return ""
    capped = any(c.kind == "total" for c in bounds.chosen)
    if capped and all(s.func in ("count", "sum") for s in a.statistics):
        return ""
    n = int(g.value)
    keys = [a.key_text(i) for i, k in enumerate(a.group_keys) if k.declared and not k.constant]
    what = " and ".join(keys) if keys else "the GROUP BY"
    one = f"one {keys[0]} each" if len(keys) == 1 else "one value of each key"
    has = (
        f"{what} has {n} declared keys"
        if len(keys) == 1
        else f"{what} have {n} declared key combinations"
    )
    return (
        f"each group's noise is sized for {n} groups per unit: {has} and, as far as the policy "
        f"says, one unit may be in all of them ({n}x the noise of one group per unit). If a "
        f"unit has fewer ({one}, say), ask the data owner to declare max_groups_per_unit in the "
        f"policy as that number (1: 1/{n} of this noise; dpsql check --upstream shows the most "
        "one unit has), or max_rows_per_unit_total (the most rows one unit has in all: no more "
        "groups than that)"
    )


MEDIAN_AIMED = ("avg", "var_pop", "var_samp", "stddev_pop", "stddev_samp", "quantile")
"""Statistics whose auto rows per unit aim at the median unit when alone in a statement
(:func:`dpsql.sql.auto_bounds.auto_items`)."""


def _notice(
    bounds: AutoBounds,
    epsilon: Fraction,
    stored: bool,
    whose: str,
    ratios: bool = False,
    serves: tuple[bool, bool] = (True, True),
    adds: tuple[str, ...] = (),
    whole: tuple[bool, str] | None = None,
) -> str:
    parts = []
    text = bounds.describe()
    if text:
        fresh = bounds.epsilon_spent > 0
        reused = any(c.reused for c in bounds.chosen)
        how = []
        chosen = [c for c in bounds.chosen if not c.reused and not c.fallback and not c.rule]
        # newcomer27: "income clamped to at most 500,000 (chosen from the data ...)" where only
        # the rows were chosen and the clamp kept its declared range ("upper clamp of income:
        # too few ... not chosen" next): with some measured bound not chosen, name which were
        not_chosen = [c for c in bounds.chosen if c.fallback and not c.wider and not c.reused]
        if fresh and chosen:
            which = f"{', '.join(_label(c) for c in chosen)} " if not_chosen else ""
            how.append(
                f"{which}chosen from the data with epsilon {float(bounds.epsilon_spent):.4g} of "
                f"{whose} {float(epsilon):.4g}"
                + (", stored for later statements" if stored else "")
            )
            if not_chosen:
                how.append(f"{', '.join(_label(c) for c in not_chosen)} not chosen: see below")
        elif fresh and all(c.wider for c in bounds.chosen if c.fallback and not c.reused):
            # newcomer26 #3: "spent on a count ... too small" read as a waste beside the stored
            # bound reused free: the count is what tried to choose them for these rows
            how.append(
                f"epsilon {float(bounds.epsilon_spent):.4g} of {whose} "
                f"{float(epsilon):.4g} spent trying to choose them for these rows (a count of "
                "units, too small to choose from), so a bound stored earlier serves instead"
            )
        elif fresh:  # every bound measured now fell back to its default (not stored)
            how.append(
                f"epsilon {float(bounds.epsilon_spent):.4g} of {whose} "
                f"{float(epsilon):.4g} spent on a count of units that was too small"
            )
        if reused:
            how.append("some reused free from earlier statements" if fresh else "reused free")
        how += sorted({c.rule for c in bounds.chosen if c.rule})  # set without the data
        parts.append(f"contribution bounds: {text} ({'; '.join(how)})")
    wider = [c for c in bounds.chosen if c.fallback and c.wider]
    if wider:
        what = ", ".join(_label(c) for c in wider)
        parts.append(
            f"{what}: too few units to choose reliably at this epsilon (a noisy count of units "
            "decided), so the table's own rows per unit over all its rows, chosen by an "
            "earlier statement and reused free, bound them instead (no unit has more rows in "
            "a part of the table than in all of it)"
        )
    kept = [c for c in bounds.chosen if c.fallback and not c.wider]
    if kept:
        what = ", ".join(_label(c) for c in kept)
        low = [c for c in kept if c.kind in ("rows", "groups", "total")]
        added = " and ".join(adds)
        counts = (
            ": this answer uses at most one row (and one group) per unit (each unit's other "
            "rows are left out: it weighs every unit alike)"
            if low and ratios
            else f": they keep at most one row (and one group) per unit, and the column of "
            f"{added} adds a noisy estimate of what they left out (half of epsilon went to "
            "it): an estimate of the truth, not of the rows kept; the accuracy notice says how "
            "far it may be off"
            if low and adds
            else ": this answer counts at most one row (and one group) per unit, so it can be "
            "well below the truth (each unit's other rows are left out)"
            if low
            else ""
        )
        # a whole-table COUNT(*) stores rows per unit, which a slice reuses (wider): not for
        # a clamp, nor for an average's rows per unit (newcomer23 #6: advised right after that
        # COUNT had run, for AVG(age) WHERE married = 1); never by that very count (newcomer25
        # #14: at epsilon 0.5 it fell back too and gave the same advice), and with the units
        # it needs to choose at this epsilon (its guard: public numbers)
        itself, needs = whole if whole is not None else (False, "")
        fits = (
            "raise dpsql.epsilon (this statement is the count over the whole table: "
            f"{needs or 'a larger epsilon needs fewer units'}), or ask the data owner to "
            "declare max_rows_per_unit_total"
            if low and not ratios and serves[0] and itself
            else "raise dpsql.epsilon, run the statement once without its filter (SELECT COUNT(*) "
            "over the whole table: its rows per unit are then reused free here, and this "
            "statement asked again is measured anew with them where they differ, charged"
            + (f"; {needs}: with fewer, ask it at the higher epsilon" if needs else "")
            + "), or ask the data owner to declare max_rows_per_unit_total"
            if low and not ratios and serves[0]
            else "raise dpsql.epsilon, or ask about more units (a wider filter)"
            + (
                ", or ask the data owner to declare max_rows_per_unit_total"
                if low and not ratios and serves[1]
                else ""
            )
        )
        # a clamp's default is its declared range: nothing is clamped off inside it
        used = (
            "the fixed defaults are used"
            + (" (the declared range for a clamp)" if len(low) < len(kept) else "")
            if low
            else "the declared range is used"
        )
        leaves = (
            "; they may leave out more than the intervals allow for (each assumes no unit lost "
            "more than 4x what they keep)"
            if low
            else ""
        )
        parts.append(
            f"{what}: too few units to choose reliably at this epsilon (a noisy count of units "
            f"decided), {used}{counts}{leaves}. For a bound that fits: {fits}"
        )
    if bounds.fallback:
        parts.append(bounds.fallback)
    return "; ".join(parts)


def _label(c: ChosenBound) -> str:
    col = c.column.rsplit(".", 1)[-1].strip('"')
    return {
        "rows": "rows per unit",
        "groups": "groups per unit",
        "value_hi": f"upper clamp of {col}",
        "value_lo": f"lower clamp of {col}",
        "total": f"cap of {total_label(c.column)} per unit over all its groups",
    }[c.kind]


def explain_text(p: Pending, epsilon: Fraction, unit: str = "unit") -> str:
    """EXPLAIN's line: the stored choices, and what running would choose and spend (in the
    words of the notice: ``unit`` is the privacy unit's column)."""
    return in_terms(_explain_text(p, epsilon), unit)


def _explain_text(p: Pending, epsilon: Fraction) -> str:
    """Each bound the statement will run with, and where it comes from, as the server takes it
    (newcomer26 #14: "1 row per unit per group ... (stored or declared: free)" named a rule of
    dpsql's as if the policy declared it or an earlier statement had stored it): set by a rule
    without the data, stored by an earlier statement (reused free), or chosen from the data
    when the statement runs (and what that costs)."""
    parts = []
    # R reads "per group" where the notice's would: a G is among the statement's bounds
    per_group = p.known.get("groups") is not None or any(it.kind == "groups" for it in p.missing)
    by_origin: dict[str, list[ChosenBound]] = {}
    for c in p.known.chosen:
        by_origin.setdefault(_origin(c), []).append(c)
    for origin, cs in by_origin.items():
        text = AutoBounds(tuple(cs)).describe(per_group=per_group)
        if not text:  # R not bounded apart (an L1 cap over groups): the rule alone says why
            parts.append(f"all of a unit's rows in a group ({origin})")
        else:
            parts.append(f"{text} ({origin})")
    if p.missing:
        what = ", ".join(it.label for it in p.missing)
        wider = p.wider is not None and any(wider_value(it, p.wider) for it in p.missing)
        instead = (
            f"rows and groups keep the table's own {_rows_text(p.wider)} (stored by an earlier "
            "SELECT COUNT(*) over the whole table), the others their default"
            if wider
            else "it keeps its default"
        )
        parts.append(
            f"{what}: chosen from the data when the statement runs, with epsilon "
            f"{float(slice_epsilon(epsilon, p)):.4g} of its {float(epsilon):.4g} (the plan "
            "below gets the rest; until chosen it shows each at its default: 1 row, 1 group, "
            "the declared range, one row's worth over all groups; so do its errors; where a "
            f"noisy count finds too few units to choose one, {instead})"
        )
    if p.known.fallback:
        parts.append(p.known.fallback)
    return "; ".join(parts)


RULE_WORDS = {
    RATIO_ROWS: "dpsql's rule for per-group averages, spreads and quantiles, which 1 row per "
    "unit in a group gives the least noise",
    TOTAL_ROWS: "dpsql's rule for per-group counts and sums: a cap on what a unit adds over all "
    "its groups bounds them instead",
}
"""A rule's words where EXPLAIN names it (the notice's own words otherwise)."""


def _origin(c: ChosenBound) -> str:
    """Where a bound EXPLAIN shows comes from, in the user's terms (nothing here is spent)."""
    if c.rule:
        return f"{RULE_WORDS.get(c.rule, c.rule)}; set without the data, free"
    if c.reused and c.wider:
        return (
            "the table's own rows per unit over all its rows, stored by an earlier statement "
            "and reused free: an earlier count of units, at the epsilon this choice gets here, "
            "found too few to choose them for these rows"
        )
    if c.reused and c.fallback:
        return (
            "the fixed defaults: an earlier statement's count of units, at the epsilon this "
            "choice gets here, found too few to choose it; that count is reused free"
        )
    if c.reused:
        return (
            "chosen from the data by an earlier statement over the same rows: stored, reused free"
        )
    return "free"


def _rows_text(v: Fraction | None) -> str:
    r = "" if v is None else f"{float(v):,.4g}"
    return f"{r} row{'' if r == '1' else 's'} per unit"
