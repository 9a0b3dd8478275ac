"""A query's (epsilon, delta): from the session, the analyst and the policy, validated.

The per-query epsilon must lie in ``(0, max_epsilon]`` and not below ``min_epsilon`` (the
analyst's values where set, else the policy defaults); delta in ``[0, MAX_DELTA]``.
"""

from __future__ import annotations

from fractions import Fraction

from dpsql.errors import InvalidParameter
from dpsql.policy.model import Policy
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis

MAX_DELTA = Fraction(1, 100)


def to_fraction(v: float | Fraction | str) -> Fraction:
    """``v`` exactly as written (``0.1`` is 1/10, not the nearest binary float)."""
    return v if isinstance(v, Fraction) else Fraction(str(v))


def confidence(policy: Policy, session: SessionContext) -> float:
    """The confidence of a query's intervals: the session's (``SET dpsql.confidence``), else the
    policy's default.

    Raises:
        InvalidParameter: not in ``(0, 1)`` (checked before any budget is reserved).
    """
    conf = session.confidence or policy.defaults.confidence
    if not 0 < conf < 1:
        raise InvalidParameter(
            f"confidence {conf:g} is out of range: it must be > 0 and < 1",
            hint="SET dpsql.confidence = 0.95",
        )
    return conf


def check_epsilon(policy: Policy, analyst_name: str, eps: Fraction, written: str = "") -> None:
    """Refuse (22023) a per-query epsilon outside ``analyst_name``'s policy range, one range in
    PostgreSQL's words whichever end it misses: ``1e-09 is outside the valid range for parameter
    "dpsql.epsilon" (0.001 .. 5)`` (``written``: the value as the analyst wrote it, else the
    exact value's shortest decimal).

    Raises:
        InvalidParameter: ``eps`` is not in ``[min_epsilon, max_epsilon]``.
    """
    lo, _, hi = policy.epsilon_range(analyst_name)
    min_eps, max_eps = to_fraction(lo), to_fraction(hi)
    if min_eps <= eps <= max_eps:
        return
    exact = isinstance(eps, Fraction) and eps.denominator == 1  # a float (nan, inf) too
    shown = written.strip() or (str(eps.numerator) if exact else repr(float(eps)))
    below = 0 < eps < min_eps
    raise InvalidParameter(
        f'{shown} is outside the valid range for parameter "dpsql.epsilon" ({lo:g} .. {hi:g})',
        detail=f"the policy's per-query minimum is {lo:g}: a nearly free query would still run "
        "the private SQL, and its run time is a nearly free measurement of the data "
        "(docs/timing.md)"
        if below
        else None,
        hint=f"SET dpsql.epsilon to a value between {lo:g} and {hi:g} (smaller is more private "
        "and noisier)",
    )


def starting_values(policy: Policy, analyst_name: str) -> dict[str, Fraction | float]:
    """What ``SHOW`` says of a dpsql setting the session has not set: the value the next
    statement takes from the policy (the analyst's defaults, else the policy's). Delta is the one
    a statement that needs one takes (Gaussian noise, groups from the data); one that needs none
    spends 0."""
    analyst = policy.analysts.get(analyst_name)
    delta = analyst.default_delta if analyst is not None else None
    return {
        "dpsql.epsilon": to_fraction(policy.epsilon_range(analyst_name)[1]),
        "dpsql.delta": to_fraction(policy.defaults.delta if delta is None else delta),
        "dpsql.confidence": policy.defaults.confidence,
    }


def resolve_params(
    policy: Policy, session: SessionContext, a: Analysis
) -> tuple[Fraction, Fraction]:
    """The query's (epsilon, delta), not validated: the session's values, else the analyst's
    defaults, else the policy's (delta is 0 unless the query needs partition selection or the
    session asked for Gaussian noise: then the policy's ``defaults.delta``, its default delta
    for Gaussian answers as docs/policy.md says)."""
    eps = session.epsilon
    if eps is None:
        eps = to_fraction(policy.epsilon_range(session.analyst)[1])
    delta = session.delta
    analyst = policy.analysts.get(session.analyst)
    if delta is None and analyst is not None and analyst.default_delta is not None:
        delta = to_fraction(analyst.default_delta)
    if delta is None:
        needs = a.needs_selection or session.mechanism == "gaussian"
        delta = to_fraction(policy.defaults.delta) if needs else Fraction(0)
    return eps, delta


def privacy_params(
    policy: Policy, session: SessionContext, a: Analysis
) -> tuple[Fraction, Fraction]:
    """The query's (epsilon, delta) from the session, the analyst and the policy, validated.

    Raises:
        InvalidParameter: epsilon or delta out of range (22023).
    """
    eps, delta = resolve_params(policy, session, a)
    check_epsilon(policy, session.analyst, eps)
    if not 0 <= delta <= MAX_DELTA:
        raise InvalidParameter(
            f"delta {float(delta):g} is out of range [0, {float(MAX_DELTA):g}]",
            hint="use a delta far below 1/(number of people), e.g. 1e-6",
        )
    return eps, delta
