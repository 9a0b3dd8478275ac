"""Racing and crashing: the ledger is never overspent and never forgets a release.

32 threads in this process and 2 separate OS processes (8 threads each), all sharing one ledger,
race to exhaust the same budgets (2 rounds; 20 with --run-slow); after every round the stored
totals equal the sum recomputed from the release log and fit every budget. A process killed with SIGKILL in the middle of its
queries leaves every answer it gave out confirmed, and every reservation counted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import pytest

from dpsql.budget.ledger import Ledger
from dpsql.dp.accounting import Cost, renyi_divergence
from dpsql.errors import BudgetExhausted
from dpsql.policy.model import Policy
from tests.integration.budget.ledger_support import (
    budget_rows,
    policy,
    release_costs,
    release_sums,
    states,
    totals,
)
from tests.integration.budget.ledger_worker import COSTS, race_loop

ROOT = Path(__file__).resolve().parents[3]
MICRO = Fraction(1, 10**6)


def _race_policy() -> Policy:
    return policy(
        {"a": {"epsilon": 3.0, "delta": 1e-5}, "b": {"epsilon": 3.0, "delta": 1e-5}},
        dataset_budget={"epsilon": 5.0, "delta": 2e-5},
    )


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.budget.ledger_worker", *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _expect(proc: subprocess.Popen[str], word: str) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == word, f"worker said {line!r}, expected {word!r}"


def _check_budgets(ledger: Ledger, dsn: str) -> None:
    """Stored totals == totals recomputed from the log, the Renyi totals too (at each budget's
    order); each budget's filter admits its totals (none is overspent)."""
    pol, schema = ledger.policy, ledger.schema
    stored = budget_rows(dsn, schema)
    logged = release_sums(dsn, schema)
    log = release_costs(dsn, schema)
    ds_key = ("dataset", pol.dataset)
    dataset = Cost()
    for name in pol.analysts:
        row = stored[("analyst", name)]
        assert row.spent.cost == logged.get(name, Cost()), name
        assert row.order is not None
        mine = [c for a, c in log if a == name]
        assert row.spent.renyi == sum(renyi_divergence(c, row.order) for c in mine), name
        [lim] = [lim for lim in ledger.limits(name) if lim.kind == "analyst"]
        assert row.filter(lim).admits(row.spent), name
        dataset = dataset + row.spent.cost
    g = pol.budget
    assert g is not None
    row = stored[ds_key]
    assert row.spent.cost == dataset and row.order is not None
    assert row.spent.renyi == sum(renyi_divergence(c, row.order) for _, c in log)
    g_lim = ledger.dataset_limit()
    assert g_lim is not None and row.filter(g_lim).admits(row.spent)


def _one_round(dsn: str, schema: str, seed: int) -> dict[str, int]:
    pol = _race_policy()
    Ledger.open(dsn, pol, schema).close()  # create the schema before the race
    procs = [
        _spawn("race", dsn, schema, pol.model_dump_json(), "8", str(seed * 10 + i)) for i in (1, 2)
    ]
    for p in procs:
        _expect(p, "ready")
    results: list[dict[str, int]] = []
    with Ledger.open(dsn, pol, schema, pool_size=16) as ledger:
        start = threading.Barrier(33)

        def run(k: int) -> None:
            start.wait()
            results.append(race_loop(ledger, ["a", "b"], seed * 1000 + k, 5))

        threads = [threading.Thread(target=run, args=(k,)) for k in range(32)]
        for t in threads:
            t.start()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        start.wait()
        for t in threads:
            t.join(timeout=120)
        for p in procs:
            out, _ = p.communicate(timeout=120)
            assert p.returncode == 0
            results.append(json.loads(out.strip().splitlines()[-1]))
        _check_budgets(ledger, dsn)
        # exhausted for real: even the cheapest release is refused, for both analysts
        for analyst in ("a", "b"):
            for cost in COSTS:
                with pytest.raises(BudgetExhausted):
                    ledger.reserve(analyst, cost, "after", delta_for_rho=MICRO)
    s = states(dsn, schema)
    committed = sum(r["committed"] for r in results)
    assert s.get("committed", 0) == committed
    assert s.get("refunded", 0) == sum(r["refunded"] for r in results)
    assert s.get("reserved", 0) == 0
    return s


def test_race_never_overspends(make_db: Callable[[str], str]) -> None:
    dsn = make_db("race")
    for round_ in range(2):
        s = _one_round(dsn, f"race{round_}", round_)
        assert s["committed"] > 40  # the race really happened


@pytest.mark.slow
def test_race_never_overspends_many_rounds(make_db: Callable[[str], str]) -> None:
    dsn = make_db("race")
    for round_ in range(20):
        _one_round(dsn, f"race{round_}", 100 + round_)


def test_exact_exhaustion_under_contention(make_db: Callable[[str], str]) -> None:
    """Pure-epsilon costs of 1/10 against a dataset budget of 7: exactly 70 releases succeed."""
    dsn = make_db("race")
    pol = policy({"a": {"epsilon": 5.0}, "b": {"epsilon": 5.0}}, dataset_budget={"epsilon": 7.0})
    ok = []
    with Ledger.open(dsn, pol, pool_size=16) as ledger:
        start = threading.Barrier(32)

        def run(k: int) -> None:
            start.wait()
            while True:
                try:
                    res = ledger.reserve("ab"[k % 2], Cost(epsilon=Fraction(1, 10)), "x")
                except BudgetExhausted:
                    return
                ledger.commit(res)
                ok.append(res.id)

        threads = [threading.Thread(target=run, args=(k,)) for k in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert len(ok) == 70
    assert totals(dsn)[("dataset", "testdata")] == Cost(epsilon=Fraction(7))


def test_kill_9_mid_queries_every_answer_accounted(make_db: Callable[[str], str]) -> None:
    dsn = make_db("crash")
    pol = policy({"alice": {"epsilon": 1000.0, "max_epsilon": 1.0}})
    Ledger.open(dsn, pol).close()
    proc = _spawn("crash", dsn, "dpsql", pol.model_dump_json(), "6")
    assert proc.stdout is not None
    reserved: set[int] = set()
    received: set[int] = set()
    while len(received) < 60:
        word, rid = proc.stdout.readline().split()
        (received if word == "received" else reserved).add(int(rid))
    os.kill(proc.pid, signal.SIGKILL)
    for line in proc.stdout:  # whatever it wrote before dying
        word, rid = line.split()
        (received if word == "received" else reserved).add(int(rid))
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    with Ledger.open(dsn, pol) as ledger:  # "restart"
        import psycopg

        with psycopg.connect(dsn) as conn:
            state = dict(conn.execute("SELECT id, state FROM dpsql.release").fetchall())
        assert received <= reserved
        assert all(state[i] == "committed" for i in received)  # every answer given out is confirmed
        assert all(state[i] in ("reserved", "committed") for i in reserved)  # nothing forgotten
        assert set(state.values()) <= {"reserved", "committed"}
        spent = totals(dsn)[("analyst", "alice")]
        assert spent == release_sums(dsn)["alice"]  # unconfirmed reservations count as spent
        assert spent.epsilon == Fraction(len(state), 1000)
        assert spent.epsilon >= Fraction(len(received), 1000)
        # the answers it gave out are still free repeats after the restart
        assert all(ledger.lookup("alice", f"key-{i}") == b"noisy answer" for i in received)


def test_killed_lock_holder_does_not_wedge_the_ledger(make_db: Callable[[str], str]) -> None:
    dsn = make_db("crash")
    pol = policy()
    with Ledger.open(dsn, pol) as ledger:
        ledger.commit(ledger.reserve("alice", Cost(epsilon=Fraction(1, 10)), "x"))
        holder = _spawn("lock", dsn, "dpsql")
        _expect(holder, "locked")
        done = threading.Event()

        def reserve() -> None:
            ledger.commit(ledger.reserve("alice", Cost(epsilon=Fraction(1, 10)), "y"))
            done.set()

        t = threading.Thread(target=reserve)
        t.start()
        assert not done.wait(0.5)  # waits for the row lock: no overspend window
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        assert done.wait(60)  # a deadline: the dead holder's lock is released, the wait ends
        t.join()
    assert totals(dsn)[("analyst", "alice")].epsilon == Fraction(2, 10)
