"""The bound-choosing mechanism of ``auto`` contribution bounds is DP at the epsilon it is charged.

Property: for every bound a statement chooses (rows per unit, groups per unit, a column's
clamp), the chosen value's distribution on neighbouring databases D and D' (D' has one more
privacy unit: many rows, in many groups, with the largest values) satisfies
P_D'(S) <= e^epsilon P_D(S) and P_D(S) <= e^epsilon P_D'(S) for every event S, where epsilon is
what the ledger charges for that bound.

Method: the per-unit bucket counts are computed by the engine's own SQL on a real PostgreSQL
(:func:`dpsql.execute.auto_bounds.histograms`), once per database: that SQL is deterministic (no
random(), no salt), so drawing the selection many times from one result is the same as running
the statement many times. The mechanisms and their epsilons are the engine's own
(:func:`~dpsql.execute.auto_bounds.mechanisms`), and the test checks that the ledger charges
exactly those epsilons when the statement really runs. Events are chosen from data: a first
batch of draws picks, per direction, the output with the largest empirical ratio; a second,
independent batch bounds epsilon from below with Clopper-Pearson at alpha = 1e-6
(:func:`auditing.epsilon_lower_bound`). A correct mechanism fails with probability <= 1e-6 per
test (each test's checks share 1e-6 by a union bound; each lower bound uses its own fresh
draws). The broken twin (the same selection run at 4x its epsilon, i.e. a quarter of the
noise, still charged epsilon) must be flagged: for the row and group bounds on the neighbours
above, for the clamp on a pair of its own (table ``v``: fixed R = G = 1, so the clamp is the
statement's only choice, and the units' largest values sit one per bucket of the clamp's grid
around its target rank; the neighbour's value lies above all of them, so it moves every
bucket's position from the top by one and the choice one bucket down).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.dp.bounds import COUNT_SHARE, TailRank, TopRank, integer_grid, value_grid
from dpsql.dp.noise_source import CSPRNG
from dpsql.engine import Engine
from dpsql.execute import auto_bounds
from dpsql.policy.model import Policy
from dpsql.session import SessionContext
from tests.dp_audit.auditing import ALPHA, epsilon_lower_bound, neighbouring_engines
from tests.policies import build_policy, private_table

N = 40_000  # draws per database and batch
EPSILON = Fraction(10)  # the statement's: 1/5 of it is the bounds' slice (1 per bound here)
POLICY = build_policy(
    base={},
    version=1,
    dataset="auto_audit",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    tables={
        "public.t": private_table(
            "u",
            {
                "g": {"type": "integer", "keys": list(range(40))},
                "x": {"type": "numeric", "bounds": [0, 100]},
            },
            rows=None,
            groups=None,
        ),
        # the clamp's own neighbours: R and G fixed, the clamp is the only choice
        "public.v": private_table("u", {"x": {"type": "numeric", "bounds": [0, 100]}}),
        # R over all of a unit's rows (TailRank): its own neighbours
        "public.w": private_table("u", {}, rows=None, groups=None, auto_max_rows=4096),
    },
    analysts={"analyst": {"budget": {"epsilon": 1000, "delta": 1e-3}}},
)
CLAMP = "SELECT SUM(x) FROM v"
TAIL = "SELECT COUNT(*) FROM w"
TAIL_EPSILON = Fraction(20)  # the rows bound's share 4: each of its two selections 2
SPREAD = 25  # units on distinct buckets of the clamp's grid, from the top down
STATEMENTS = (
    "SELECT COUNT(*), SUM(x) FROM t",  # rows per unit (all its rows), the clamp of x
    # rows per unit per group, groups per unit, the clamp of x (an AVG beside: no L1 cap)
    "SELECT g, COUNT(*), AVG(x) FROM t GROUP BY g",
    "SELECT AVG(x) FROM t",  # rows per unit aimed at the median unit, the clamp of x
    # groups per unit, and L1 caps over a unit's groups: its rows, its sum of x
    "SELECT g, COUNT(*), SUM(x) FROM t GROUP BY g",
)


def _load(dsn: str, extra: bool) -> None:
    """200 units whose row counts, group counts and largest values fall off geometrically from
    the top (a few units per bucket of each grid around the target rank, so that a neighbour
    visibly shifts the choice); the neighbour is one unit above everyone on every count."""
    rows = []
    for u in range(200):
        n, groups, top = max(1, round(400 * 0.9**u)), max(1, round(40 * 0.93**u)), 100 * 0.93**u
        rows += [(u, i % groups, round(top * (1 - i / (2 * n)), 3)) for i in range(n)]
    if extra:
        rows += [(999, i % 40, 100) for i in range(1000)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (u integer, g integer, x numeric)")
        conn.execute("CREATE TABLE v (u integer, x numeric)")
        conn.execute("CREATE TABLE w (u integer)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", rows)
            cur.executemany("INSERT INTO v VALUES (%s, %s)", _clamp_rows(extra))
        # table w: units 0..22 with one per bucket of R's grid (1 .. 4096, 24 buckets) from the
        # top down (unit i has the i-th largest candidate's rows), 257 units with one row (enough for
        # both selections: the second's target is 4k = 32, not the upper quartile); the
        # neighbour has 4096 rows: it shares the top bucket with unit 0, moves the others down
        grid = integer_grid(4096)
        sizes = [grid[len(grid) - 1 - u] for u in range(23)] + [1] * 257 + ([4096] if extra else [])
        units = [999 if u == 280 else u for u in range(len(sizes))]
        conn.execute(
            "INSERT INTO w SELECT u FROM unnest(%s::int[], %s::int[]) AS s(u, n), "
            "generate_series(1, n)",
            (units, sizes),
        )


def _clamp_rows(extra: bool) -> list[tuple[int, float]]:
    """Table v: 300 units; unit i < SPREAD has its largest value in the i-th bucket from the
    top of the clamp's grid (the middle of the bucket), the others a value in the lowest; the
    neighbour (999) one at the top, 100: it shares the top bucket with unit 0 and moves every
    other unit one position down from the top."""
    grid = value_grid(Fraction(0), Fraction(100), False)
    b = len(grid)
    rows: list[tuple[int, float]] = []
    for u in range(300):
        if u < SPREAD:
            lo, hi = grid[b - 2 - u], grid[b - 1 - u]
            rows += [(u, float((lo + hi) / 2)), (u, float(lo))]  # the largest decides
        else:
            rows.append((u, float(grid[0] / 2)))
    return rows + ([(999, 100.0)] if extra else [])


@pytest.fixture(scope="module")
def engines(make_db: Callable[[str], str]) -> Iterator[tuple[Engine, Engine]]:
    yield from neighbouring_engines(make_db, POLICY, _load, "autob")


def _items(engine: Engine, sql: str) -> tuple[Any, list[TopRank], list[np.ndarray]]:
    s = SessionContext(analyst="analyst", epsilon=EPSILON)
    prepared = engine.prepare(sql, "analyst")
    a = engine.analysis(prepared, [])
    pend = auto_bounds.pending(engine, prepared, s, a)
    mechs = auto_bounds.mechanisms(pend, EPSILON)
    return pend, mechs, auto_bounds.histograms(engine, a, pend.missing)


def _audit(
    mech: TopRank | TailRank,
    h_d: np.ndarray,
    h_d2: np.ndarray,
    draw: Callable[[np.ndarray, int], np.ndarray] | None = None,
    outputs: int = 0,
    alpha: float = 2 * ALPHA,
) -> float:
    """The larger of both directions' epsilon lower bounds (events chosen on a first batch),
    each at level 1 - alpha/2: a correct mechanism's exceeds its epsilon with probability <=
    alpha. (A test making k honest checks passes ALPHA / k: <= 1e-6 per test; the broken twins
    keep the default, each direction at ALPHA as before.)
    Outputs: a bucket, or len(h_d) (the guard kept the fixed defaults); ``draw`` / ``outputs``
    replace them (a TailRank's pair of selections)."""
    b = outputs or len(h_d) + 1
    sample = draw or mech.choose_many
    first = [np.bincount(sample(h, N), minlength=b) for h in (h_d, h_d2)]
    second = [np.bincount(sample(h, N), minlength=b) for h in (h_d, h_d2)]
    return _bound(first, second, alpha)


def _bound(first: list[np.ndarray], second: list[np.ndarray], alpha: float) -> float:
    """:func:`_audit`'s bound from the output counts (on D, on D') of its two batches of N."""
    worst = -np.inf
    for x, y in ((0, 1), (1, 0)):  # event: the output with the largest ratio P_y / P_x
        ratio = (first[y] + 1) / (first[x] + 1)
        ratio[first[y] < 30] = 0  # too rare to bound: skip
        j = int(np.argmax(ratio))
        lb = epsilon_lower_bound(int(second[x][j]), N, int(second[y][j]), N, alpha=alpha / 2)
        worst = max(worst, lb)
    return worst


def _audit_pair_and_output(
    mech: TailRank, h_d: np.ndarray, h_d2: np.ndarray, alpha_pair: float, alpha_output: float
) -> tuple[float, float]:
    """A TailRank's two audits, :func:`_audit` on its pair of selections (``_pairs``) and on
    its post-processed bound, from one set of draws: the bound is a function of the pair
    (``TailRank.combine``, as ``choose_many`` computes it), so N pairs a database and batch are
    exactly the draws each audit makes on its own (each still N, its events chosen on its first
    batch and bounded on its second); the two bounds need no independence: each holds at its
    level, and the union bound adds the levels as before. Half the draws of two calls."""
    b, k = len(h_d) + 1, len(h_d)
    batches = [[mech.choose_pairs(h, N) for h in (h_d, h_d2)] for _ in range(2)]
    pair = [[np.bincount(f * b + s, minlength=b * b) for f, s in one] for one in batches]
    out = [[np.bincount(mech.combine(f, s, k), minlength=b) for f, s in one] for one in batches]
    return _bound(pair[0], pair[1], alpha_pair), _bound(out[0], out[1], alpha_output)


def _all_items(engines: tuple[Engine, Engine]) -> list[tuple[str, TopRank, np.ndarray, np.ndarray]]:
    d, d2 = engines
    out = []
    for sql in STATEMENTS:
        pend, mechs, hist_d = _items(d, sql)
        pend2, mechs2, hist_d2 = _items(d2, sql)
        assert [it.kind for it in pend.missing] == [it.kind for it in pend2.missing]
        assert mechs == mechs2
        for it, m, h1, h2 in zip(pend.missing, mechs, hist_d, hist_d2, strict=True):
            assert not np.array_equal(h1, h2), it.kind  # the neighbour shows in every count
            out.append((f"{sql}: {it.kind}", m, h1, h2))
    kinds = sorted(k.split(": ")[1] for k, *_ in out)
    assert (
        kinds == ["groups", "groups", "rows", "rows", "rows", "total", "total"] + ["value_hi"] * 3
    )
    assert any(m.top_share == Fraction(1, 2) for _, m, _, _ in out)  # the median variant
    assert any(isinstance(m, TailRank) for _, m, _, _ in out)  # R over all of a unit's rows
    return out


def test_bound_choices_are_dp_at_their_charged_epsilon(engines: tuple[Engine, Engine]) -> None:
    """Ten bounds, two directions each: each check at level 1 - 1e-6/20 (false failure <= 1e-6
    for the test). The L1 caps over groups (``total``: TailRank over each unit's total rows or
    sum of x) are audited on their post-processed output here; the pair of selections they
    share with R over all rows is audited, with its broken twin, in test_tail_rank_is_dp_...
    (the per-unit number differs, one bucket per unit either way)."""
    items = _all_items(engines)
    for name, mech, h_d, h_d2 in items:
        share = 3 if name.startswith("SELECT g,") else 2  # bounds sharing the statement's slice
        assert mech.epsilon == EPSILON / 5 / share, name
        lb = _audit(mech, h_d, h_d2, alpha=ALPHA / len(items))
        assert lb <= float(mech.epsilon), (name, lb, float(mech.epsilon))


def test_broken_twin_is_caught(engines: tuple[Engine, Engine]) -> None:
    """A quarter of the noise (epsilon x 4) while charging epsilon: the audit flags it.

    Only for the row and group bounds: on these neighbours the clamp choices (value_hi) aim at a
    rank with many units above it, so one unit barely moves them and the 4x twin's bound read
    0.95-1.09 x epsilon over 6 runs (not reliably above). The clamp's twin is caught on its own
    neighbours: :func:`test_clamp_choice_is_dp_and_its_broken_twin_is_caught`."""
    caught = []
    for name, mech, h_d, h_d2 in _all_items(engines):
        if name.endswith(": value_hi") or isinstance(mech, TailRank):
            continue  # each caught on its own neighbours (below)
        # the selection at 4x the charged epsilon (its own share is 1 - COUNT_SHARE of it)
        broken = TopRank(mech.epsilon * 4 / (1 - COUNT_SHARE), mech.rank)
        caught.append((name, _audit(broken, h_d, h_d2) > float(mech.epsilon)))
    assert len(caught) == 4 and all(c for _, c in caught), caught


def _clamp_choice(engine: Engine) -> tuple[TailRank, np.ndarray]:
    """The clamp's mechanism as the statement aims it (:func:`auto_bounds.choose`: its target
    rank from the R and G in force) and its bucket counts on ``engine``'s database."""
    s = SessionContext(analyst="analyst", epsilon=EPSILON)
    prepared = engine.prepare(CLAMP, "analyst")
    a = engine.analysis(prepared, [])
    pend = auto_bounds.pending(engine, prepared, s, a)
    assert [it.kind for it in pend.missing] == ["value_hi"]
    (hist,) = auto_bounds.histograms(engine, a, pend.missing)
    ((_, mech),) = auto_bounds.choose(a, pend, [hist], EPSILON, CSPRNG)
    assert auto_bounds.mechanisms(pend, EPSILON)[0].epsilon == mech.epsilon  # what is charged
    # a SUM without GROUP BY: its balance (about 1 unit) lies below what one selection
    # resolves, so the clamp follows the tail of the largest values (TailRank, slope_min 1)
    assert isinstance(mech, TailRank) and mech.slope_min == 1, mech
    return mech, hist


def test_clamp_choice_is_dp_and_its_broken_twin_is_caught(engines: tuple[Engine, Engine]) -> None:
    """The clamp's own neighbours (table v): the pair of selections' epsilon lower bound stays
    at most its charge, and so does the post-processed clamp's (false failure <= 1e-6: 1e-6/2
    each); the twin whose selections run at 4x the charge exceeds it (the first, at rank k,
    picks the bucket one below its target on D' far more often than on D)."""
    d, d2 = engines
    mech, h_d = _clamp_choice(d)
    mech2, h_d2 = _clamp_choice(d2)
    assert mech == mech2 and mech.epsilon == EPSILON / 5  # the clamp has the slice alone
    # the first target rank lies inside the spread, one unit per bucket there
    assert 2 <= mech.rank <= SPREAD - 3 and mech.rank < 300 / 4, mech.rank
    assert int(h_d2.sum()) == int(h_d.sum()) + 1 and h_d2[-1] == h_d[-1] + 1
    b = len(h_d) + 1
    correct, output = _audit_pair_and_output(mech, h_d, h_d2, ALPHA / 2, ALPHA / 2)
    assert correct <= float(mech.epsilon), correct
    assert output <= float(mech.epsilon), output
    broken = dataclasses.replace(mech, epsilon=mech.epsilon * 4)
    caught = _audit(broken, h_d, h_d2, _pairs(broken, b), b * b)
    assert caught > float(mech.epsilon), (caught, float(mech.epsilon))


def _tail_choice(engine: Engine) -> tuple[TailRank, np.ndarray]:
    s = SessionContext(analyst="analyst", epsilon=TAIL_EPSILON)
    prepared = engine.prepare(TAIL, "analyst")
    a = engine.analysis(prepared, [])
    pend = auto_bounds.pending(engine, prepared, s, a)
    assert [(it.kind, it.per_group) for it in pend.missing] == [("rows", False)]
    (hist,) = auto_bounds.histograms(engine, a, pend.missing)
    ((_, mech),) = auto_bounds.choose(a, pend, [hist], TAIL_EPSILON, CSPRNG)
    assert isinstance(mech, TailRank)
    assert auto_bounds.mechanisms(pend, TAIL_EPSILON)[0].cost == mech.cost  # what is charged
    return mech, hist


def _pairs(mech: TailRank, b: int) -> Callable[[np.ndarray, int], np.ndarray]:
    """Both selections' outputs as one number (the mechanism's output before its
    post-processing: DP at the charge is a property of the pair)."""

    def draw(h: np.ndarray, n: int) -> np.ndarray:
        first, second = mech.choose_pairs(h, n)
        return first * b + second

    return draw


def test_tail_rank_is_dp_and_its_broken_twin_is_caught(engines: tuple[Engine, Engine]) -> None:
    """R over all of a unit's rows (COUNT(*) without GROUP BY) is two selections at half the
    bound's epsilon each (:class:`dpsql.dp.bounds.TailRank`). On table w (280 units: the
    first target, rank 8, lies among 23 units one per bucket, the second, 32, among the one-row
    units; the neighbour above all
    moves each by one bucket) the pair's epsilon lower bound stays at most the charge (false
    failure <= 1e-6), and the twin, both selections at 4x, exceeds it."""
    d, d2 = engines
    mech, h_d = _tail_choice(d)
    mech2, h_d2 = _tail_choice(d2)
    assert mech == mech2 and mech.epsilon == TAIL_EPSILON / 5
    assert int(h_d2.sum()) == int(h_d.sum()) + 1 == 281 and h_d2[-1] == h_d[-1] + 1
    # both selections run (the noisy count misses the two-selection limit with p < e^-50)
    assert mech._two_limit(len(h_d)) + 140 <= 280, mech._two_limit(len(h_d))
    b = len(h_d) + 1
    # the pair, and the post-processed bound alone (the other half of 1e-6), from one set of draws
    correct, output = _audit_pair_and_output(mech, h_d, h_d2, ALPHA / 2, ALPHA / 2)
    assert correct <= float(mech.epsilon), correct
    assert output <= float(mech.epsilon), output
    broken = TailRank(mech.epsilon * 4 / (1 - COUNT_SHARE), mech.rank, mech.balance)
    caught = _audit(broken, h_d, h_d2, _pairs(broken, b), b * b)
    assert caught > float(mech.epsilon), (caught, float(mech.epsilon))


def test_ledger_charges_what_the_mechanisms_spend(
    engines: tuple[Engine, Engine], make_db: Callable[[str], str]
) -> None:
    """The audited epsilons are the charged ones: running the statement records one
    ``auto_bound`` release per bound at exactly the mechanism's epsilon, and the statement's
    total is the epsilon it asked for."""
    d, _ = engines
    total = _charged_as_audited(d.backend.dsn, POLICY, STATEMENTS, _items, EPSILON)
    assert total == len(STATEMENTS) * EPSILON


def _recorded(ledger: Ledger) -> list[tuple[str, Fraction]]:
    """The analyst's releases as the ledger recorded them (mechanism, exact epsilon), oldest
    first. Not ``ledger.history``: it shows each epsilon rounded up at 12 decimal places (an
    even split of 2 among 3 bounds reads 0.666666666667 there, recorded exactly as 2/3)."""
    with ledger.connection() as conn:
        rows = conn.execute(
            ledger.q("SELECT mechanism, epsilon FROM {s}.release WHERE analyst = %s ORDER BY id"),
            ["analyst"],
        ).fetchall()
    return [(str(m), Fraction(str(e))) for m, e in rows]


def _charged_as_audited(
    dsn: str,
    policy: Policy,
    statements: Sequence[str],
    items: Callable[[Engine, str], tuple[Any, Sequence[Any], Any]],
    epsilon: Fraction,
) -> Fraction:
    """Run each statement on a ledgered engine: it spends ``epsilon`` and records one
    ``auto_bound`` release per bound at exactly its audited mechanism's epsilon (``items``).
    Returns the ledger's total."""
    ledger = Ledger.open(dsn, policy, schema=f"dpsql_a{uuid.uuid4().hex[:8]}")
    e = Engine(policy, dsn, ledger, pool_size=2)
    try:
        for sql in statements:
            _, mechs, _ = items(e, sql)
            res = e.execute(e.prepare(sql, "analyst"), SessionContext("analyst", epsilon=epsilon))
            assert res.epsilon_spent == pytest.approx(float(epsilon))
            autos = [eps for mech, eps in _recorded(ledger) if mech == "auto_bound"]
            assert autos[len(autos) - len(mechs) :] == [m.epsilon for m in mechs]
        return sum((eps for _, eps in _recorded(ledger)), Fraction(0))
    finally:
        e.close()
        ledger.close()


def test_alpha() -> None:
    assert ALPHA == 1e-6
