"""The plan of a private query: budget split, mechanism and sensitivity of every measure.

Neighbouring databases differ by all rows of one privacy unit. After contribution bounding a unit
touches at most G = max_groups_per_unit groups and moves each of them by at most R·c, with
R = max_rows_per_unit and c the per-row contribution (G = 1 without GROUP BY; R = G = 1 with
``privacy_unit: row``): by keeping at most R rows per group (row path) or by a partial aggregate
clamped into an interval of magnitude R·c (decomposable measures; the proof is in
:mod:`dpsql.sql.rewrite.bound_partials`). A measure therefore has L1 sensitivity G·R·c and L2
sensitivity sqrt(G)·R·c over the vector of all groups (count of distinct units: c = 1 per unit,
so G and sqrt(G)). A COUNT or SUM whose unit partials are scaled into an L1 cap L over the
unit's groups (``Measure.total``: :mod:`dpsql.sql.rewrite.bound_partials`) moves by at most L in
L1 and so in L2 too: its sensitivities are min(G·R·c, L) and min(sqrt(G)·R·c, L).

The query's epsilon is split evenly over its measures (and DP partition selection, when a GROUP BY key
is not public). With Laplace noise each measure is (epsilon/k)-DP; with Gaussian noise the query's
(epsilon, delta) is turned into a zCDP budget rho split evenly (rho/k each).

Quantiles, MIN/MAX and mode() are released by selection (exponential mechanism, report-noisy-max:
:mod:`dpsql.dp.quantiles`), which is pure epsilon: each gets epsilon/k of the query's epsilon
(after partition selection), its utility has sensitivity Δu = R per group and the mechanism spends
epsilon/(k G) per group. With Gaussian noise the other k - q measures share the rest of the epsilon
(and the delta), turned into rho; the costs add up (basic composition of the ledger).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from decimal import Decimal, localcontext
from fractions import Fraction
from functools import cached_property
from typing import Literal

from dpsql.dp.accounting import Cost, epsilon_to_rho, sequential
from dpsql.dp.mechanisms import Gaussian, Laplace, grid_for
from dpsql.dp.partition import PartitionSelection
from dpsql.dp.quantiles import _GAMMA_CLIP as GAMMA_CLIP  # the sampler's clip, checked here
from dpsql.dp.quantiles import Mode, Quantile
from dpsql.errors import InvalidParameter
from dpsql.sql.alarms import ALARM_SHARE, AlarmPlan, alarm_measures, alarm_plans, quantile_alarms
from dpsql.sql.analysis import Analysis, Measure
from dpsql.sql.bias import (
    BIAS_SHARE,
    FALLBACK_SHARE,
    BiasPlan,
    BiasTarget,
    bias_plans,
    bias_targets,
    corrected_targets,
    end_rows,
)

MechanismName = Literal["laplace", "gaussian"]


def sqrt_up(x: Fraction) -> Fraction:
    """A rational upper bound of sqrt(x) (within 1e-9 relative)."""
    if x <= 0:
        return Fraction(0)
    r = Fraction(math.isqrt(math.ceil(x * 10**18)) + 1, 10**9)
    assert r * r >= x
    return r


@dataclass(frozen=True)
class MeasurePlan:
    measure: Measure
    mechanism: Laplace | Gaussian | Quantile | Mode
    sensitivity: Fraction  # before grid rounding slack (for selection: of the utility, per group)
    # a quantile's interval ends: the same selection aimed OFFSET rows below / above the target
    bounds: tuple[Quantile, Quantile] | None = None
    # a quantile whose left-out rows are counted (dpsql.sql.bias.quantile_targets): the chance
    # that count's upper reach falls short, which its interval's level also pays
    left_out_alpha: float = 0.0
    # a quantile strictly inside (0, 1): the noisy count of each group's ranked rows that says
    # whether its answer is clear (QUANTILE_ROWS_SHARE; dpsql.execute.selected_measures.unclear)
    rows: Laplace | None = None

    @property
    def key(self) -> str:
        return self.measure.key

    @property
    def costs(self) -> list[Cost]:
        rows = [self.rows.cost] if self.rows is not None else []
        return [self.mechanism.cost, *(b.cost for b in self.bounds or ()), *rows]


@dataclass(frozen=True)
class Plan:
    analysis: Analysis
    epsilon: Fraction
    delta: Fraction
    mechanism: MechanismName
    measures: tuple[MeasurePlan, ...]
    selection: PartitionSelection | None
    # estimates of what contribution bounding removed (dpsql.sql.bias), from BIAS_SHARE of epsilon
    bias: tuple[BiasPlan, ...] = ()
    # outside counts of statistics without a bias estimate (VARIANCE, STDDEV), from ALARM_SHARE
    alarms: tuple[AlarmPlan, ...] = ()

    @cached_property
    def cost(self) -> Cost:
        """What the plan spends (a pure function of its mechanisms; the plan is memoized per
        statement, analysis and privacy parameters, so this is summed once per plan)."""
        costs = [c for mp in self.measures for c in mp.costs]
        if self.selection is not None:
            costs.append(self.selection.cost)
        costs += [b.cost for b in self.bias]
        costs += [x.cost for x in self.alarms]
        return sequential(costs)

    def bias_plan(self, key: str) -> BiasPlan | None:
        return next((b for b in self.bias if b.target.key == key), None)

    def measure_plan(self, key: str) -> MeasurePlan:
        for mp in self.measures:
            if mp.key == key:
                return mp
        raise KeyError(key)


def _laplace_std(k: int, eps: Fraction) -> float:
    return math.sqrt(2) * k / float(eps)


def _gaussian_std(k: int, eps: Fraction, delta: Fraction) -> float:
    rho = float(epsilon_to_rho(eps, delta))
    return math.sqrt(k / (2 * rho)) if rho > 0 else math.inf


def choose_mechanism(requested: str, k: int, eps: Fraction, delta: Fraction) -> MechanismName:
    """``auto`` picks the lower-variance mechanism for k equally sensitive outputs."""
    if requested == "laplace" or delta <= 0:
        if requested == "gaussian":
            raise InvalidParameter(
                "Gaussian noise needs delta > 0", hint="SET dpsql.delta = 1e-6 (or similar)"
            )
        return "laplace"
    if requested == "gaussian":
        return "gaussian"
    return "gaussian" if _gaussian_std(k, eps, delta) < _laplace_std(k, eps) else "laplace"


def _choose(requested: str, k: int, eps: Fraction, delta: Fraction) -> MechanismName:
    """The additive-noise mechanism; "laplace" (pure epsilon) when every measure is a selection."""
    if k == 0:
        if requested == "gaussian":
            choose_mechanism(requested, 1, Fraction(1), delta)  # same refusal without delta
        return "laplace"
    return choose_mechanism(requested, k, eps, delta)


def _selection_plan(a: Analysis, m: Measure, epsilon: Fraction) -> MeasurePlan:
    """Quantile or mode of one measure at pure ``epsilon`` (utility sensitivity R per group)."""
    r = a.max_rows
    if m.kind == "quantile":
        assert m.quantile is not None
        top = m.hi if m.grid_hi is None else m.grid_hi  # (a grid may end at 0: MIN(-n), n 1..3)

        def q(eps: Fraction, offset: int = 0, rows: int = r) -> Quantile:
            return Quantile(
                m.quantile, eps, m.lo, top, m.buckets,  # type: ignore[arg-type]
                contribution_bound=rows, max_groups=a.max_groups, integer=m.integral,
                offset=offset,
            )  # fmt: skip

        # half the share for the answer, a fifth for each interval end (dpsql.dp.quantiles) and
        # a tenth for the count of ranked rows that says where the answer is clear (a quantile
        # strictly inside (0, 1): MIN and MAX have no such threshold); the ends of a quantile
        # of all the rows rank more of a unit's rows (bias.end_rows)
        e = end_rows(a, m)
        counted = 0 < m.quantile < 1
        share = QUANTILE_ROWS_SHARE if counted else Fraction(0)
        end_share = (1 - QUANTILE_POINT_SHARE - share) / 2
        end = q(epsilon * end_share, rows=e)
        k = math.ceil(end.gap_bound(QUANTILE_END_ALPHA)) + 2 if end.group_epsilon > 0 else 2
        ends = (
            q(epsilon * end_share, -k, e),
            q(epsilon * end_share, k, e),
        )
        point = q(epsilon * QUANTILE_POINT_SHARE)
        # a unit adds or removes at most R ranked rows in each of its G groups: L1 = G R
        rows = Laplace(Fraction(a.max_groups * r), epsilon * share, Fraction(1)) if share else None
        return MeasurePlan(m, point, Fraction(r), ends, rows=rows)
    else:
        mech = Mode(epsilon, contribution_bound=r, max_groups=a.max_groups)
    return MeasurePlan(m, mech, Fraction(r))


QUANTILE_POINT_SHARE = Fraction(1, 2)
QUANTILE_ROWS_SHARE = Fraction(1, 10)  # MIN and MAX: none, their ends get it
QUANTILE_END_ALPHA = 0.0025  # each end misses with at most this probability: a 99.5% interval


def _share(eps: Fraction, part: int, k: int) -> Fraction:
    """The part of eps that part of k measures get (0 when there is no measure: keys only)."""
    return eps * part / k if k else Fraction(0)


MIN_EPSILON = Fraction(1, 10**9)  # below this, every answer is noise (and floats underflow)
MIN_DELTA = Fraction(1, 10**100)  # a positive delta below this underflows to 0.0 in float math
MAX_NOISE_STEPS = 2**50  # Laplace scale (sigma for Gaussian) in grid steps: every draw stays
# far inside int64 (a draw beyond 2**63 has probability below exp(-8000))


def _sci(value: Fraction) -> str:
    """``value`` in 3 significant digits, even below float's range (1e-400 is not 0)."""
    with localcontext() as ctx:
        ctx.prec = 3
        return format(Decimal(value.numerator) / Decimal(value.denominator), "g")


def _too_small(what: str, value: Fraction, floor: Fraction, hint: str) -> InvalidParameter:
    return InvalidParameter(
        f"{what} {_sci(value)} is too small: dpsql needs at least {_sci(floor)}",
        detail="the noise would swamp any answer, and the sampler's arithmetic would overflow",
        hint=hint,
    )


def check_noise(plan: Plan) -> Plan:
    """Refuse a plan whose noise can't be sampled (before any budget is reserved or data read).

    A tiny epsilon or delta used to get as far as the sampler after the private query ran and
    failed there (int64 overflow, float division by zero): an internal error instead of 22023,
    and the private SQL executed for a negligible charge.
    """
    for mp in plan.measures:
        m = mp.mechanism
        if any(not _selection_ok(b) for b in mp.bounds or ()):
            m = mp.bounds[0]  # type: ignore[index]
        if isinstance(m, (Quantile, Mode)) and not _selection_ok(m):
            raise InvalidParameter(
                f"epsilon {_sci(plan.epsilon)} is too small for {mp.measure.kind}: its share per "
                f"group ({_sci(Fraction(m.epsilon) / m.max_groups)}) is below what the "
                "exponential mechanism can sample exactly",
                hint="raise SET dpsql.epsilon, or ask for fewer aggregates in one query",
            )
        steps = (
            m.noise_scale
            if isinstance(m, Laplace)
            else sqrt_up(m.noise_sigma2)
            if isinstance(m, Gaussian)
            else Fraction(0)
        )
        if steps > MAX_NOISE_STEPS:
            raise InvalidParameter(
                f"epsilon {_sci(plan.epsilon)} is too small for {mp.measure.kind}: its noise "
                f"would be {_sci(steps)} grid steps wide",
                hint="raise SET dpsql.epsilon, or aggregate values with smaller bounds",
            )
    if any(b.dropped.noise_scale > MAX_NOISE_STEPS for b in plan.bias):
        raise _too_small("epsilon", plan.epsilon, MIN_EPSILON, "raise SET dpsql.epsilon")
    sel = plan.selection
    if sel is not None and sel.mechanism.noise_scale > MAX_NOISE_STEPS:
        raise _too_small("epsilon", plan.epsilon, MIN_EPSILON, "raise SET dpsql.epsilon")
    return plan


def _selection_ok(m: Quantile | Mode) -> bool:
    """The exact samplers' own limits (dpsql.dp.quantiles: Quantile.choose, Mode.release)."""
    eps = m.group_epsilon  # epsilon / max_groups rounded down to 2**-20: 0 below that
    if eps <= 0:
        return False
    if isinstance(m, Mode):
        return True
    r, d = m.contribution_bound, m.target.denominator
    clip = math.ceil(Fraction(2 * r * GAMMA_CLIP * d) / eps)
    return 2 * r * d * eps.denominator < 2**48 and clip * eps.numerator < 2**62


def make_plan(a: Analysis, epsilon: Fraction, delta: Fraction, mechanism: str = "auto") -> Plan:
    """Split (epsilon, delta) over the measures and build each mechanism."""
    if epsilon < MIN_EPSILON:
        raise _too_small("epsilon", epsilon, MIN_EPSILON, "SET dpsql.epsilon = 0.1 (or similar)")
    if 0 < delta < MIN_DELTA:
        raise _too_small("delta", delta, MIN_DELTA, "SET dpsql.delta = 1e-6 (or similar)")
    targets = bias_targets(a)
    # ALARM_SHARE counts the units outside a VARIANCE's declared range (dpsql.sql.bias)
    # and a quantile's (its rows' bucket codes say which are outside)
    alarm = epsilon * ALARM_SHARE if alarm_measures(a) or quantile_alarms(a) else Fraction(0)
    if not targets and not alarm:
        return check_noise(_make_plan(a, epsilon, delta, mechanism))
    adds = corrected_targets(a, targets)
    if adds:
        # the fixed-default fallback: half of epsilon on what the bounds left out, which the
        # column adds; only where that moves pure epsilon alone (Laplace answers: the same
        # total cost, so the same charge as reserved before the bounds were chosen)
        fallback = _with_bias(a, epsilon, delta, mechanism, targets, alarm, FALLBACK_SHARE, adds)
        usual = _with_bias(a, epsilon, delta, mechanism, targets, alarm, BIAS_SHARE)
        if fallback.mechanism == "laplace" and fallback.cost == usual.cost:
            return check_noise(fallback)
        return check_noise(usual)
    # BIAS_SHARE of epsilon measures what bounding removed; the rest is planned as before
    share = BIAS_SHARE if targets else Fraction(0)
    return check_noise(_with_bias(a, epsilon, delta, mechanism, targets, alarm, share))


def _with_bias(
    a: Analysis,
    epsilon: Fraction,
    delta: Fraction,
    mechanism: str,
    targets: tuple[BiasTarget, ...],
    alarm: Fraction,
    share: Fraction,
    adds: frozenset[str] = frozenset(),
) -> Plan:
    """The plan with ``share`` of ``epsilon`` on the bias ``targets`` (``adds``: those whose
    estimate the column adds) and ``alarm`` on the outside counts; the rest planned as before."""
    main = _make_plan(a, epsilon * (1 - share) - alarm, delta, mechanism)
    if any(t.measure.kind == "quantile" for t in targets):  # (dpsql.sql.bias.quantile_targets)
        counted = {t.key for t in targets}
        main = replace(
            main,
            measures=tuple(
                replace(mp, left_out_alpha=QUANTILE_END_ALPHA) if mp.key in counted else mp
                for mp in main.measures
            ),
        )
    return replace(
        main,
        epsilon=epsilon,
        bias=bias_plans(targets, epsilon * share, adds),
        alarms=alarm_plans(a, alarm) if alarm else (),
    )


def _make_plan(a: Analysis, epsilon: Fraction, delta: Fraction, mechanism: str) -> Plan:
    ms = list(a.measures)
    k = len(ms)
    kq = sum(1 for m in ms if m.selected)  # released by selection, pure epsilon each
    selection = None
    eps_m, delta_m = epsilon, delta
    if a.needs_selection:
        if delta <= 0:
            from dpsql.sql.refusal_text import period_hint

            period = period_hint(a)
            raise InvalidParameter(
                "grouping by a column without declared keys needs delta > 0 "
                "(partition selection may reveal a group with probability delta)",
                hint=(f"{period}; or " if period else "")
                + "SET dpsql.delta = 1e-6, or declare `keys:` for the GROUP BY column",
            )
        eps_sel = epsilon / (k + 1)
        eps_m = epsilon - eps_sel
        name = _choose(mechanism, k - kq, _share(eps_m, k - kq, k), delta / 2)
        d_sel = delta / 2 if name == "gaussian" else delta
        delta_m = delta - d_sel
        selection = PartitionSelection(eps_sel, d_sel, a.max_groups)
    else:
        name = _choose(mechanism, k - kq, _share(eps_m, k - kq, k), delta_m)
    g, r = Fraction(a.max_groups), Fraction(a.max_rows)
    plans = []
    kn = k - kq
    rho = epsilon_to_rho(eps_m * kn / k, delta_m) / kn if name == "gaussian" else Fraction(0)
    for m in ms:
        if m.kind == "count_keys":  # rows per key: a unit moves <= R per group, G groups (L1)
            plans.append(MeasurePlan(m, Laplace(g * r, eps_m / k, Fraction(1)), g * r))
            continue
        if m.selected:
            plans.append(_selection_plan(a, m, eps_m / k))
            continue
        per_group = m.per_row() * (1 if m.kind == "count_units" else r)
        # an L1 cap over a unit's groups (Measure.total) bounds both norms of its vector
        cap = m.total if m.total is not None and m.kind != "count_units" else None
        if name == "laplace":
            sens = g * per_group if cap is None else min(g * per_group, cap)
            eps_i = eps_m / k
            grid = Fraction(1) if m.integral else grid_for(sens / eps_i)
            slack = Fraction(0) if m.integral else g * grid
            mech: Laplace | Gaussian = Laplace(sens + slack, eps_i, grid)
        else:
            sens = sqrt_up(g) * per_group if cap is None else min(sqrt_up(g) * per_group, cap)
            sigma = sqrt_up(sens * sens / (2 * rho))
            grid = Fraction(1) if m.integral else grid_for(sigma)
            slack = Fraction(0) if m.integral else sqrt_up(g) * grid
            mech = Gaussian(sens + slack, rho, grid)
        plans.append(MeasurePlan(m, mech, sens))
    return Plan(a, epsilon, delta, name, tuple(plans), selection)
