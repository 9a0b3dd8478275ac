"""`EXPLAIN` for private queries: the plan, before any data is read or budget spent."""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from sqlglot import exp

from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.dp.quantiles import Mode, Quantile
from dpsql.errors import DpsqlError, InternalError, UnsupportedSql
from dpsql.execute.auto_bounds import (
    UNTIL_CHOSEN,
    Pending,
    slice_epsilon,
    too_small,
    with_defaults,
)
from dpsql.execute.auto_bounds_text import explain_text
from dpsql.execute.avg_unclear import clear_count
from dpsql.execute.classify import classify
from dpsql.execute.notices import quantile_cover, quantile_note, selection_accuracy
from dpsql.execute.privacy_params import resolve_params
from dpsql.execute.selected_measures import clear_rows
from dpsql.explain.measure_words import l1_caps, measure_words
from dpsql.explain.offline import offline_note
from dpsql.policy.model import Policy
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis, Measure
from dpsql.sql.analyze import analyze
from dpsql.sql.apply_bounds import apply_bounds
from dpsql.sql.auto_bound_types import AutoBounds
from dpsql.sql.auto_bounds import auto_items, policy_choices
from dpsql.sql.grouping_sets import SetsPlan, make_sets_plan, set_label
from dpsql.sql.intervals import derived_outputs
from dpsql.sql.join_cap import fallback_note
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.parse import ParsedQuery, parse_statement
from dpsql.sql.per_unit import substitute, with_units
from dpsql.sql.plan import MeasurePlan, Plan, make_plan
from dpsql.sql.rewrite import private_query
from dpsql.sql.tree import split, split_budget
from dpsql.sql.wording import plural


@dataclass(frozen=True)
class MeasureLine:
    measure: str
    mechanism: str
    sensitivity: str
    noise_std: float
    budget: str
    grid: str
    half_width: float


@dataclass(frozen=True)
class OutputLine:
    column: str
    statistic: str
    mechanism: str
    half_width: str


def _key_line(a: Analysis, i: int) -> str:
    """The group key's line with its public domain when the statement or the policy lists it
    (the keys every release shows anyway: never data), e.g. "group key in ('books', 'travel')"."""
    g = a.group_keys[i] if i < len(a.group_keys) else None
    if g is not None and g.constant:
        return "group key: a constant (one group)"
    if g is None or g.keys is None:
        return "group key"
    shown = [f"'{k}'" for k in g.keys[:6]] + (["NULL"] if g.null_key else [])
    more = f", ... {g.domain_size} keys" if len(g.keys) > 6 else ""
    return f"group key in ({', '.join(shown)}{more})"


@dataclass(frozen=True)
class ExplainReport:
    sql: str
    rewritten: str
    epsilon: Fraction
    delta: Fraction
    cost: str
    contribution: str
    selection: str | None
    measures: tuple[MeasureLine, ...]
    outputs: tuple[OutputLine, ...]
    # GROUP BY ROLLUP / CUBE / GROUPING SETS: one line per measured set (its share of the budget)
    sets: tuple[str, ...] = ()
    # ``auto`` contribution bounds: those fixed without data (in the plan) and those chosen when
    # the statement runs (what that spends); None for fixed bounds
    auto: str | None = None


def _fmt(x: Fraction | float) -> str:
    return f"{float(x):.6g}"


def explain(policy: Policy, text: str, session: SessionContext) -> ExplainReport:
    """Plan a private query without touching any data."""
    st = parse_statement(text)
    if not isinstance(st, ParsedQuery):
        raise UnsupportedSql("EXPLAIN takes a SELECT")
    view = policy.for_analyst(session.analyst)
    kind = classify(st.tree, view)
    if kind != "private":
        raise UnsupportedSql(
            f"this is a {kind} query: it is answered exactly, with no noise and no budget"
        )
    a = analyze(st.tree, view)
    return _plan_report(policy, text, a, session)


def explain_leaves(
    policy: Policy, text: str, session: SessionContext
) -> list[tuple[str, ExplainReport]]:
    """Each DP leaf's SQL and report at its share of the budget, for a statement that is a tree
    of leaves (dpsql/sql/tree.py); the flat statement's own refusal otherwise."""
    import dataclasses

    st = parse_statement(text)
    if not isinstance(st, ParsedQuery):
        raise UnsupportedSql("EXPLAIN takes a SELECT")
    view = policy.for_analyst(session.analyst)
    try:
        return [(text, explain(policy, text, session))]
    except DpsqlError as error:
        sp = split(st.tree, view, analyze)
        if sp is None:
            raise error from None
    leaf_view = with_units(view, sp.units)
    analyses = [analyze(leaf, leaf_view) for leaf in sp.leaves]
    analyses = [
        dataclasses.replace(a, unique_unit=True, one_row_per_unit=True) if sp.units else a
        for a in analyses
    ]
    lead = next((a for a in analyses if a.needs_selection), analyses[0])
    eps, delta = resolve_params(policy, session, lead)
    shares = split_budget([a.needs_selection for a in analyses], eps, delta, session.mechanism)
    out = []
    for leaf, a, (e, d) in zip(sp.leaves, analyses, shares, strict=True):
        s = SessionContext(
            analyst=session.analyst, epsilon=e, delta=d, mechanism=session.mechanism,
            confidence=session.confidence,
        )  # fmt: skip
        sql = leaf.sql(POSTGRES)
        rep = _plan_report(policy, sql, a, s)
        if sp.units:  # the synthetic per-unit tables as the SELECTs they stand for
            units = tuple((u.name, u.select) for u in sp.units)
            bounded = substitute(private_query(a, "<salt>"), units)
            rep = replace(rep, rewritten=bounded.sql(POSTGRES, pretty=True))
        out.append((sql, rep))
    return out


def _plan_report(policy: Policy, text: str, a: Analysis, session: SessionContext) -> ExplainReport:
    """The report as the statement would be planned with no stored choices: the ``auto`` bounds
    fixed without data (G from a few declared keys, R = 1 for per-group ratios) in place, the
    epsilon choosing the others takes out of the measures' (as :mod:`dpsql.explain.run`)."""
    eps, delta = resolve_params(policy, session, a)
    d = policy.defaults
    conf = session.confidence or d.confidence
    pend = Pending(AutoBounds(policy_choices(a), fallback=fallback_note(a)), auto_items(a))
    note, spent, bounds = None, Fraction(0), Fraction(0)
    if pend.needed:
        small = too_small(pend, eps) if pend.missing else None
        offline = offline_note(a)
        if small is None:
            note = f"{explain_text(pend, eps, a.private.privacy_unit)}; {offline}"
            spent = bounds = slice_epsilon(eps, pend)  # their releases' epsilons add up to it
        else:
            note = f"{small.fallback}; {offline}"
        a = apply_bounds(a, small if small is not None else with_defaults(pend))
    if a.grouping_sets:
        plan: Plan | SetsPlan = make_sets_plan(a, eps - spent, delta, session.mechanism)
    else:
        plan = make_plan(a, eps - spent, delta, session.mechanism)
    rep = report(text, plan, conf)
    if bounds:  # the total cost: what running it would charge, the bound choices included
        c = plan.cost
        outs = tuple(
            replace(o, half_width=f"{o.half_width} {UNTIL_CHOSEN}")
            if o.half_width.startswith(("±", "about"))
            else o
            for o in rep.outputs
        )
        rep = replace(
            rep,
            outputs=outs,
            cost=f"epsilon={_fmt(c.epsilon + bounds)}, delta={_fmt(c.delta)}, rho={_fmt(c.rho)} "
            f"(epsilon {_fmt(c.epsilon)} for the answer and {_fmt(bounds)} for choosing "
            "contribution bounds)",
        )
    return replace(rep, epsilon=eps, auto=note)


def report(text: str, plan: Plan | SetsPlan, conf: float) -> ExplainReport:
    """The report of a planned private query (``text``: its SQL) at confidence ``conf``.

    Reads nothing: the plan holds the policy's bounds, the mechanisms and their budgets.
    """
    if isinstance(plan, SetsPlan):
        return _sets_report(text, plan, conf)
    sql = private_query(plan.analysis, "<salt>").sql(POSTGRES, pretty=True)
    return _report(text, plan, sql, conf)


def _selection_line(mp: MeasurePlan, conf: float, said: str) -> MeasureLine:
    """A quantile's or mode's line: utility sensitivity, epsilon, bucket width, rank/count error."""
    m = mp.mechanism
    assert isinstance(m, (Quantile, Mode))
    if isinstance(m, Quantile):
        grid, err = _fmt(m.width), m.rank_error(conf)
    else:
        n = len(mp.measure.candidates or ()) or 1
        grid, err = "candidates", m.count_error(conf, n)
    return MeasureLine(
        said,
        m.name,
        f"utility={_fmt(mp.sensitivity)} per group",
        float("nan"),
        f"eps={_fmt(m.epsilon)} (eps/{m.max_groups} per group)",
        grid,
        err,
    )


def _report(text: str, plan: Plan, rewritten: str, conf: float) -> ExplainReport:
    a = plan.analysis
    words, parts = measure_words(a), measure_words(a, bounds=False)

    def said(m: Measure, whole: bool = True) -> str:
        return (words if whole else parts).get(m.key, m.shown)

    lines = []
    for mp in plan.measures:
        m = mp.mechanism
        if isinstance(m, (Quantile, Mode)):
            lines.append(_selection_line(mp, conf, said(mp.measure)))
            if mp.rows is not None and isinstance(m, Quantile):  # (selected_measures.clear_rows)
                r = mp.rows
                lines.append(
                    MeasureLine(
                        f"rows ranked by {said(mp.measure)} (its answer NULL below "
                        f"{clear_rows(m, conf):,} of them)",
                        r.name,
                        f"L1={_fmt(r.sensitivity)}",
                        r.std,
                        f"eps={_fmt(r.epsilon)}",
                        _fmt(r.grid),
                        r.half_width(conf),
                    )
                )
            continue
        budget = f"rho={_fmt(m.rho)}" if isinstance(m, Gaussian) else f"eps={_fmt(m.epsilon)}"
        lines.append(
            MeasureLine(
                said(mp.measure),
                m.name,
                f"{'L2' if isinstance(m, Gaussian) else 'L1'}={_fmt(m.sensitivity)}",
                m.std,
                budget,
                _fmt(m.grid),
                m.half_width(conf),
            )
        )
    for b in plan.bias:  # what bounding removed: dpsql.sql.bias (the interval's far side)
        cap = f"(cap {_fmt(b.target.cap)} per unit)"
        alarms = [
            (f"removed by bounds from {said(b.target.measure, False)} {cap}", b.dropped),
            (f"over cap by bounds in {said(b.target.measure, False)} {cap}", b.over_cap),
        ]
        if b.outside is not None:  # units with a value outside the declared range
            alarms.append(
                (f"outside declared range by bounds in {said(b.target.measure)}", b.outside)
            )
        for what, mech in alarms:
            lines.append(
                MeasureLine(
                    what,
                    mech.name,
                    f"L1={_fmt(mech.sensitivity)}",
                    mech.std,
                    f"eps={_fmt(mech.epsilon)}",
                    _fmt(mech.grid),
                    mech.half_width(conf),
                )
            )
    for x in plan.alarms:  # a VARIANCE's count of units outside the declared range
        m = x.outside
        lines.append(
            MeasureLine(
                f"outside declared range of {said(x.measure)}",
                m.name,
                f"L1={_fmt(m.sensitivity)}",
                m.std,
                f"eps={_fmt(m.epsilon)}",
                _fmt(m.grid),
                m.half_width(conf),
            )
        )
    outs = []
    names = [e.alias_or_name for e in a.outer.expressions]
    derived = {pos: len(sis) for pos, _, sis in derived_outputs(a)}
    for pos, item in enumerate(a.outer.expressions):
        body = item.this if hasattr(item, "this") else item
        sql = body.sql(POSTGRES)
        if isinstance(body, exp.Column) and body.name.startswith("_dp_s"):
            s = a.statistics[int(sql[len("_dp._dp_s") :])]
            if s.func in ("quantile", "mode"):
                if s.func == "quantile":
                    cover = quantile_cover(plan, s, conf)  # (does it hold the truth?)
                    hw = quantile_note(plan, s, conf) + (f".{cover}" if cover else "")
                else:
                    hw = "no value interval; " + selection_accuracy(plan, s, conf)
                name = plan.measure_plan(s.measures[0]).mechanism.name
                outs.append(OutputLine(names[pos], s.sql, name, hw))
                continue
            k = len(s.measures)
            hws = [
                _half_width(plan.measure_plan(m).mechanism, 1 - (1 - conf) / k) for m in s.measures
            ]
            if s.func in ("count", "count_distinct", "sum"):
                hw = f"±{hws[0]:.6g}" + _noise_alone(plan, s)
            elif s.func == "avg":
                need = clear_count(plan, s, conf)  # below it: NULL, value and interval
                hw = (
                    f"about ±{hws[0]:.4g}/N (N: the noisy count; per row: the ratio's range over "
                    f"sum ± {hws[0]:.4g} and count ± {hws[1]:.4g}, within the bounds"
                    + (
                        f"; NULL where N is below {need:,} or the interval spans the whole range"
                        if need is not None
                        else ""
                    )
                    + ")"
                ) + _noise_alone(plan, s)
            else:
                hw = "from the noisy count, sum and sum of squares (conservative box)"
            outs.append(OutputLine(names[pos], s.sql, plan.mechanism, hw))
        elif isinstance(body, exp.Column) and body.name.startswith("_dp_g"):
            outs.append(
                OutputLine(
                    names[pos],
                    _key_line(a, int(body.name[len("_dp_g") :])),
                    "none (public key)" if not a.needs_selection else "partition selection",
                    "exact",
                )
            )
        elif not any(c.name.startswith("_dp_s") for c in body.find_all(exp.Column)):
            outs.append(OutputLine(names[pos], sql, "none (keys / GROUPING)", "exact"))
        else:
            nstats = derived.get(pos)
            hw = (
                f"interval arithmetic over the intervals of its {nstats} statistics at 1 - "
                f"alpha/{nstats}"
                if nstats
                else "post-processed: no interval reported"
            )
            outs.append(OutputLine(names[pos], sql, plan.mechanism, hw))
    c = plan.cost
    cost = f"epsilon={_fmt(c.epsilon)}, delta={_fmt(c.delta)}, rho={_fmt(c.rho)}"
    contribution = (
        "row-level privacy (each row is a different person)"
        if a.private.row_privacy
        else f"{a.private.privacy_unit}: <= {plural(a.max_rows, 'row')} per group, "
        f"<= {plural(a.max_groups, 'group')}"
    )
    if not a.private.row_privacy:
        contribution += l1_caps(a)
    if a.pre_join_rows and not a.private.row_privacy:
        contribution += (
            f", each joined table first keeps <= {plural(a.pre_join_rows, 'row')} per unit"
        )
    if a.unique_unit and not a.one_row_per_unit:
        contribution += (
            f" (the catalog proves one row per {a.private.privacy_unit}: a unique key; nothing "
            "is dropped, so no epsilon is spent estimating dropped rows)"
        )
    proven = [(c, a.private.columns[c]) for c in a.proven_bounds if c in a.private.columns]
    if proven:
        ranges = ", ".join(f"{c} in [{_fmt(col.lo)}, {_fmt(col.hi)}]" for c, col in proven)
        contribution += (
            f" (the catalog proves {ranges}: a validated CHECK constraint; values clamped into "
            "exactly these declared bounds are read unclamped)"
        )
    sel = None
    if plan.selection is not None:
        ps = plan.selection
        sel = (
            f"noisy count of distinct units >= {ps.threshold} (Laplace scale "
            f"{_fmt(ps.mechanism.scale)}, eps={_fmt(ps.epsilon)}, delta={_fmt(ps.delta)})"
        )
    return ExplainReport(
        text,
        rewritten,
        plan.epsilon,
        plan.delta,
        cost,
        contribution,
        sel,
        tuple(lines),
        tuple(outs),
    )


def _sets_report(text: str, plan: SetsPlan, conf: float) -> ExplainReport:
    """One report for a GROUP BY with grouping sets: every set's measures, outputs and SQL,
    labelled by the set, and one line per set with its share of the statement's budget."""
    k = len(plan.sets)
    measures: list[MeasureLine] = []
    outputs: list[OutputLine] = []
    sets: list[str] = []
    sqls: list[str] = []
    selections: list[str] = []
    for sp in plan.sets:
        label = set_label(plan.analysis, sp.keys)
        sql = private_query(sp.plan.analysis, "<salt>").sql(POSTGRES, pretty=True)
        r = _report(text, sp.plan, sql, conf)
        measures += [replace(m, measure=f"{label} {m.measure}") for m in r.measures]
        for item, o in zip(plan.analysis.outer.expressions, r.outputs, strict=True):
            body = item.this if isinstance(item, exp.Alias) else item
            if isinstance(body, exp.Column) and body.name.startswith("_dp_g"):
                if int(body.name[len("_dp_g") :]) not in sp.keys:
                    o = replace(o, statistic="NULL (rolled up)", mechanism="none")
            outputs.append(replace(o, column=f"{label} {o.column}"))
        release = (
            "grand total, always released"
            if not sp.keys
            else "partition selection"
            if r.selection
            else "public keys, every group released"
        )
        repeat = f", answers {len(sp.positions)} listed sets" if len(sp.positions) > 1 else ""
        sets.append(
            f"{label}: epsilon={_fmt(sp.plan.epsilon)} (1/{k} of {_fmt(plan.epsilon)}), "
            f"delta={_fmt(sp.plan.delta)}, cost {r.cost}; {release}{repeat}"
        )
        sqls.append(f"-- grouping set {label}\n{sql}")
        if r.selection:
            selections.append(f"{label} {r.selection}")
    c = plan.cost
    a = plan.analysis
    contribution = (
        "row-level privacy (each row is a different person)"
        if a.private.row_privacy
        else f"{a.private.privacy_unit}: <= {plural(a.max_rows, 'row')} per group, "
        f"<= {plural(a.max_groups, 'group')}{l1_caps(a)}, in each grouping set (the sets "
        "compose sequentially)"
    )
    return ExplainReport(
        text,
        "\n\n".join(sqls),
        plan.epsilon,
        plan.delta,
        f"epsilon={_fmt(c.epsilon)}, delta={_fmt(c.delta)}, rho={_fmt(c.rho)} "
        f"(sum over {k} grouping sets)",
        contribution,
        "; ".join(selections) or None,
        tuple(measures),
        tuple(outputs),
        tuple(sets),
    )


NOISE_ALONE = (
    " (the noise alone; the answer's interval also holds what the bounds leave out, "
    "estimated when it runs, and gives this noise a share of the miss chance: its notice "
    "states that interval, wider)"
)


def _noise_alone(plan: Plan, s: Any) -> str:
    """What an additive statistic's EXPLAIN error is where the answer's interval will say more
    (newcomer22 #15: EXPLAIN's ±38.5 beside the notice's 'noise ±98.5' for one release): the
    noise alone at the level, while the interval adds the estimate of what the bounds left
    out (dpsql.sql.bias) and gives the noise only its share of the miss chance."""
    keys = set(s.measures)
    if any(b.target.key in keys and not b.target.nothing_removed for b in plan.bias):
        return NOISE_ALONE
    return ""


def _half_width(mech: Laplace | Gaussian | Quantile | Mode, level: float) -> float:
    """An additive mechanism's noise half-width at ``level`` (selections have none)."""
    if isinstance(mech, (Quantile, Mode)):
        raise InternalError(f"{mech.name} has no additive noise half-width")
    return mech.half_width(level)
