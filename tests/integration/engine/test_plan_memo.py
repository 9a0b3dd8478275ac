"""The engine's plan memo: a repeated statement's plan is a lookup, and never a stale one.

A plan is a pure function of the analysis it plans, whose identity carries the contribution
bounds in force and the catalog's proof of one row per unit, and of the session's epsilon, delta
and mechanism: :meth:`dpsql.engine.Engine.plan` memoizes it under all of them
(:func:`dpsql.execute.private_sql.memoized`, which also keeps the bounded and the
post-processing SQL). The catalog is still read for every statement, noise is still drawn and
the ledger still charged at every execution.

Each property is a function returning its violations (empty: it holds), and each test also runs
it on an engine with a deliberately broken memo, which it must catch: one keyed by the
statement's text instead of its analysis (it would miss an ALTER TABLE, another analyst's view,
bounds another session stored), one that ignores the session's settings (SET dpsql.epsilon,
dpsql.delta, dpsql.mechanism), and a memo of whole answers (no fresh noise, no charge).
Deterministic (plans, the ledger, the zero-noise source), except the noise check, whose false
failure probability is stated there.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterator
from fractions import Fraction
from typing import Any, TypeVar

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.execute import auto_bounds, private_sql
from dpsql.execute.caches import Memo
from dpsql.execute.prepared import PrivateQuery
from dpsql.execute.private import with_stored_bounds
from dpsql.policy.model import Policy
from dpsql.session import SessionContext
from tests.helpers import EXACT
from tests.policies import DocArgs, PolicyMaker, private_table

T = TypeVar("T")
UNITS = 1200
BUDGET = {"epsilon": 1000, "delta": 0.1}
GROUPED = "SELECT g, COUNT(*) FROM m GROUP BY g"  # g without declared keys: partition selection
KEYED = "SELECT h, COUNT(*) FROM m GROUP BY h"  # h's keys from public.zones (denied to "closed")


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("planmemo")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE zones (code text)")
        conn.execute("INSERT INTO zones VALUES ('a'), ('b'), ('secret_zone')")
        for t, unit in (("m", f"u % {UNITS // 3}"), ("k", "u")):  # m: 3 rows per unit; k: 1
            conn.execute(f"CREATE TABLE {t} (uid integer NOT NULL, g text, h text, v numeric)")
            conn.execute(
                f"INSERT INTO {t} SELECT {unit}, CASE WHEN u % 2 = 0 THEN 'x' ELSE 'y' END, "
                "CASE WHEN u % 2 = 0 THEN 'a' ELSE 'b' END, u % 7 "
                f"FROM generate_series(1, {UNITS}) u"
            )
    return dsn


COLUMNS = {
    "g": {"type": "text"},
    "h": {"type": "text", "keys_from": "public.zones.code"},
    "v": {"type": "numeric", "bounds": [0, 10], "clamp": "bounds"},
}
# the tables m and k at R = 2 rows per unit, or auto (None)
TABLES = {
    r: {f"public.{t}": private_table("uid", COLUMNS, rows=r, groups=2) for t in "mk"}
    for r in (2, None)
}
PLAN_MEMO: DocArgs = {
    "base": {"version": 1},
    "public_tables": ["public.zones"],
    "analysts": {
        "open": {"budget": BUDGET},
        "closed": {"budget": BUDGET, "deny": ["public.zones"]},
    },
}


@pytest.fixture
def engines(dsn: str, make_policy: PolicyMaker) -> Iterator[Callable[..., tuple[Engine, Ledger]]]:
    """Engines with ledgers (closed at exit): ``make(policy, schema=None)`` (a new ledger
    schema, or ``schema``: another session of the same ledger)."""
    made: list[tuple[Engine, Ledger]] = []

    def make(
        policy: Policy, schema: str | None = None, noise: Any = EXACT
    ) -> tuple[Engine, Ledger]:
        ledger = Ledger.open(dsn, policy, schema=schema or f"dpsql_pm{uuid.uuid4().hex[:8]}")
        made.append((Engine(policy, dsn, ledger, pool_size=2, noise=noise), ledger))
        return made[-1]

    yield make
    for e, led in made:
        e.close()
        led.close()


# -- broken memos (the twins each check must catch) --------------------------------------------


def _by_text(
    memo: Memo, prepared: PrivateQuery, a: Any, key: tuple[Hashable, ...], make: Callable[[], T]
) -> T:
    """Keyed by the statement's text and the settings, not by the analysis planned."""
    full = ("broken", prepared.text, *key)
    hit = memo.get(full)
    if hit is None:
        hit = make()
        memo.remember(full, hit)
    return hit  # type: ignore[no-any-return]


def _without_settings(
    memo: Memo, prepared: PrivateQuery, a: Any, key: tuple[Hashable, ...], make: Callable[[], T]
) -> T:
    """Keyed by the analysis, but only by the first part of the key (not epsilon, delta...)."""
    full = ("broken", key[0], id(a))
    hit = memo.get(full)
    if hit is None or hit[0] is not a:
        hit = (a, make())
        memo.remember(full, hit)
    return hit[1]  # type: ignore[no-any-return]


def _session(
    who: str, eps: Fraction, delta: Fraction = Fraction(1, 10**6), mech: str = "auto"
) -> SessionContext:
    return SessionContext(who, eps, delta, mech)


# -- the properties -------------------------------------------------------------------------


def check_settings(engine: Engine) -> list[str]:
    """SET dpsql.epsilon / delta / mechanism: each plan is the one planned afresh for the
    session's settings, and an execution is charged its own epsilon."""
    bad = []
    p = engine.prepare(GROUPED, "open")
    assert isinstance(p, PrivateQuery)
    for eps, delta, mech in [
        (Fraction(1), Fraction(1, 10**6), "auto"),
        (Fraction(1, 2), Fraction(1, 10**6), "auto"),
        (Fraction(1, 2), Fraction(1, 10**5), "auto"),
        (Fraction(1, 3), Fraction(1, 10**5), "laplace"),  # ("auto" may have chosen laplace:
        (Fraction(1, 3), Fraction(1, 10**5), "gaussian"),  # its repeat would be free)
    ]:
        s = _session("open", eps, delta, mech)
        for _ in range(2):  # the second: from the memo
            got = engine.plan(p, s)
            e, d = engine.privacy_params(s, got.analysis)
            if got != engine.plan_analysis(got.analysis, e, d, mech) or got.epsilon != eps:
                bad.append(f"plan at {(eps, delta, mech)}: epsilon {got.epsilon}")
        r = engine.execute(p, s)
        if r.epsilon_spent != pytest.approx(float(eps)) or r.cached:
            bad.append(f"execution at {(eps, delta, mech)}: spent {r.epsilon_spent}")
    return bad


def check_alter_table(engine: Engine, dsn: str) -> list[str]:
    """ALTER TABLE adds, then drops, the key that proves one row per unit: each plan follows
    the catalog, and the statement is answered after the drop (not refused for a stale proof)."""
    bad = []
    p = engine.prepare("SELECT COUNT(*) FROM k", "open")
    assert isinstance(p, PrivateQuery)
    s = _session("open", Fraction(1))  # the same settings throughout: the memo's key
    runs = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        for step, unique in [
            ("SELECT 1", False),
            ("ALTER TABLE k ADD CONSTRAINT k_pkey PRIMARY KEY (uid)", True),
            ("ALTER TABLE k DROP CONSTRAINT k_pkey", False),
        ]:
            conn.execute(step)
            plans = [engine.plan(p, s) for _ in range(2)]
            if any(pl.analysis.unique_unit != unique for pl in plans):
                bad.append(f"after {step!r}: the plan's unique_unit is not {unique}")
            for _ in range(2):  # each at another epsilon: run, not a free repeat
                runs += 1
                try:
                    engine.execute(p, _session("open", Fraction(1, 2) + Fraction(runs, 1000)))
                except Exception as e:  # (the property: it is answered)
                    bad.append(f"after {step!r}: {type(e).__name__}: {e}")
    return bad


def check_views(engine: Engine) -> list[str]:
    """The same text under two analysts' views: the analyst denied the key table gets its own
    plan (partition selection), never the other's (public keys, listing 'secret_zone')."""
    bad = []
    for who, selects in (("open", False), ("closed", True), ("open", False), ("closed", True)):
        p = engine.prepare(KEYED, who)
        assert isinstance(p, PrivateQuery)
        s = _session(who, Fraction(1))
        plan = engine.plan(p, s)
        if (plan.selection is not None) != selects:  # type: ignore[union-attr]
            bad.append(f"{who}: selection {plan.selection}")  # type: ignore[union-attr]
        rows = engine.execute(p, s).rows
        if who == "closed" and any(r[0] == "secret_zone" for r in rows):
            bad.append(f"{who} was shown the denied table's value: {rows}")
    return bad


def check_stored_bounds(one: Engine, other: Engine) -> list[str]:
    """``auto`` bounds another session stored after this engine planned the statement: the
    next plan uses them (the plan of the analysis with them applied, not the earlier one)."""
    bad = []
    sql = "SELECT COUNT(*) FROM m WHERE v > 1"
    p = one.prepare(sql, "open")
    assert isinstance(p, PrivateQuery)
    s = _session("open", Fraction(1))
    before = one.plan(p, s)  # nothing stored yet: planned (and memoized) without bounds
    if auto_bounds.pending(one, p, s, before.analysis).known.chosen:
        bad.append("a bound was stored before the other session chose it")
    other.execute(other.prepare("SELECT COUNT(v) FROM m WHERE v > 1", "open"), s)  # same slice
    a = one.plan(p, s).analysis
    pend = auto_bounds.pending(one, p, s, a)
    if not pend.known.chosen or pend.missing:
        bad.append(f"the other session's bound is not found: {pend}")
    resolved = with_stored_bounds(one, p, a, pend)
    for _ in range(2):
        got = one.plan(p, s, analysis=resolved)
        if got.analysis is not resolved or got.analysis.max_rows != resolved.max_rows:
            bad.append(f"planned R {got.analysis.max_rows}, stored {resolved.max_rows}")
    r = one.execute(p, s)
    if "reused free" not in r.notices[0] or r.epsilon_spent != pytest.approx(1.0):
        bad.append(f"the execution did not reuse the stored bound: {r.notices}")
    return bad


def check_fresh_each_time(engine: Engine, ledger: Ledger) -> list[str]:
    """With ``repeats: off``, six executions of one prepared statement: six charges, and not
    six equal answers. COUNT(*) at epsilon 1/20 with R = 2 draws discrete Laplace noise of scale
    at least 40 (bias estimate's share only widens it): P(noise = x) <= (1 - r)/(1 + r) < 1/80
    with r = exp(-1/40), so six equal answers have probability < (1/80)^5 < 1e-9."""
    p = engine.prepare("SELECT COUNT(*) FROM m", "open")
    s = _session("open", Fraction(1, 20), mech="laplace")
    values = {engine.execute(p, s).rows[0][0] for _ in range(6)}
    charged = [h for h in ledger.history("open") if h.state == "committed"]
    bad = [] if len(values) > 1 else [f"six equal answers: {values}"]
    return bad + ([] if len(charged) == 6 else [f"{len(charged)} charges for 6 executions"])


# -- tests: each property holds, and catches its broken memo ----------------------------------


def test_plans_follow_set_epsilon_delta_mechanism(
    engines: Callable[..., tuple[Engine, Ledger]], make_policy: PolicyMaker, monkeypatch: Any
) -> None:
    policy = make_policy("planmemo", tables=TABLES[2], **PLAN_MEMO).policy
    assert check_settings(engines(policy)[0]) == []
    monkeypatch.setattr(private_sql, "memoized", _without_settings)
    assert check_settings(engines(policy)[0]) != []


def test_plans_follow_alter_table(
    engines: Callable[..., tuple[Engine, Ledger]],
    make_policy: PolicyMaker,
    dsn: str,
    monkeypatch: Any,
) -> None:
    policy = make_policy("planmemo", tables=TABLES[2], **PLAN_MEMO).policy
    assert check_alter_table(engines(policy)[0], dsn) == []
    monkeypatch.setattr(private_sql, "memoized", _by_text)
    assert check_alter_table(engines(policy)[0], dsn) != []


def test_plans_follow_each_analysts_view(
    engines: Callable[..., tuple[Engine, Ledger]], make_policy: PolicyMaker, monkeypatch: Any
) -> None:
    policy = make_policy("planmemo", tables=TABLES[2], **PLAN_MEMO).policy
    assert check_views(engines(policy)[0]) == []
    monkeypatch.setattr(private_sql, "memoized", _by_text)
    assert check_views(engines(policy)[0]) != []


def test_plans_follow_bounds_stored_by_another_session(
    engines: Callable[..., tuple[Engine, Ledger]], make_policy: PolicyMaker, monkeypatch: Any
) -> None:
    policy = make_policy("planmemo", tables=TABLES[None], **PLAN_MEMO).policy  # auto R
    schema = f"dpsql_pm{uuid.uuid4().hex[:8]}"
    assert check_stored_bounds(engines(policy, schema)[0], engines(policy, schema)[0]) == []
    monkeypatch.setattr(private_sql, "memoized", _by_text)
    schema = f"dpsql_pm{uuid.uuid4().hex[:8]}"
    assert check_stored_bounds(engines(policy, schema)[0], engines(policy, schema)[0]) != []


def test_each_execution_draws_noise_and_is_charged(
    engines: Callable[..., tuple[Engine, Ledger]], make_policy: PolicyMaker, monkeypatch: Any
) -> None:
    from dpsql.dp.noise_source import CSPRNG

    policy = make_policy("planmemo", tables=TABLES[2], repeats="off", **PLAN_MEMO).policy
    assert check_fresh_each_time(*engines(policy, noise=CSPRNG)) == []
    engine, ledger = engines(policy, noise=CSPRNG)
    answers: dict[int, Any] = {}
    real = engine.execute

    def memo_of_answers(prepared: Any, *args: Any, **kw: Any) -> Any:
        if id(prepared) not in answers:
            answers[id(prepared)] = real(prepared, *args, **kw)
        return answers[id(prepared)]

    monkeypatch.setattr(engine, "execute", memo_of_answers)
    assert check_fresh_each_time(engine, ledger) != []
