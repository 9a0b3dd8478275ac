"""`dpsql budget reconcile` (issue #20): reservations left open by a process killed between
charging and answering are listed, then committed or refunded by the operator, audited."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from fractions import Fraction

import psycopg

from dpsql.budget.ledger import Ledger
from dpsql.demo import POLICY
from dpsql.dp.accounting import Cost
from dpsql.policy import load_policy
from tests.helpers import ROOT


def _reconcile(ledger: str, *flags: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSQL_")}
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run(
        [sys.executable, "-m", "dpsql", "budget", "reconcile", "--policy", str(POLICY),
         "--ledger", ledger, "--older-than", "0.005", *flags],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def _spent(led: Ledger) -> Fraction:
    (st,) = [s for s in led.remaining("analyst") if s.budget == "analyst"]
    return Fraction(st.epsilon_spent)


def test_reconcile_lists_then_refunds_or_commits(make_db: Callable[[str], str]) -> None:
    dsn = make_db("reconcile")
    policy = load_policy(POLICY)
    with Ledger.open(dsn, policy) as led:
        statement = "SELECT count(*) FROM purchases WHERE quantity > 5"
        first = led.reserve("analyst", Cost(Fraction(1, 2)), "fp1", statement=statement)
        second = led.reserve("analyst", Cost(Fraction(1, 4)), "fp2", statement="SELECT 2")
        done = led.reserve("analyst", Cost(Fraction(1, 8)), "fp3")
        led.commit(done)  # answered: not stale
        assert _spent(led) == Fraction(7, 8)
        time.sleep(1)
        listed = _reconcile(dsn)
        assert f"release {first.id}" in listed and statement in listed
        assert f"release {second.id}" in listed and f"release {done.id}" not in listed
        assert _spent(led) == Fraction(7, 8)  # listing changes nothing

        out = _reconcile(dsn, "--refund", "--reason", "host lost")
        assert "2 reservation(s) refunded" in out
        assert _spent(led) == Fraction(1, 8)
        assert "no open reservations" in _reconcile(dsn, "--commit")
        with psycopg.connect(dsn) as conn:
            states = dict(conn.execute("SELECT id, state FROM dpsql.release").fetchall())
            audit = conn.execute(
                "SELECT action, detail->>'release_id', detail->>'reason' FROM dpsql.admin_audit"
                " ORDER BY id"
            ).fetchall()
        assert states[first.id] == states[second.id] == "refunded"
        assert audit == [("reconcile-refund", str(first.id), "host lost"),
                         ("reconcile-refund", str(second.id), "host lost")]  # fmt: skip

        third = led.reserve("analyst", Cost(Fraction(1, 16)), "fp4")
        time.sleep(1)
        assert "1 reservation(s) committed" in _reconcile(dsn, "--commit")
        assert _spent(led) == Fraction(1, 8) + Fraction(1, 16)  # still charged, now closed
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT state FROM dpsql.release WHERE id = %s", [third.id])
            assert row.fetchone() == ("committed",)
