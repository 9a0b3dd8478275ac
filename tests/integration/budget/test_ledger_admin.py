"""Administration and lifecycle: grants, resets, the audit log, the CLI, migrations, privileges."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from dpsql.budget import admin
from dpsql.budget import schema as ledger_schema
from dpsql.budget.ledger import Ledger
from dpsql.dp.accounting import Cost, default_order
from dpsql.errors import BudgetExhausted, InvalidParameter, UndefinedObject
from dpsql.sql.canonical import cache_key, canonical
from tests.integration.budget.ledger_support import policy, totals
from tests.policies import PolicyMaker

E = Fraction


def _audit(dsn: str) -> list[tuple[str, str, str, dict[str, object]]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT actor, action, name, detail FROM dpsql.admin_audit ORDER BY id"
        ).fetchall()


def test_grant_extends_and_reset_zeroes_with_audit(make_db: Callable[[str], str]) -> None:
    dsn = make_db("admin")
    pol = policy({"alice": {"epsilon": 1.0}}, dataset_budget={"epsilon": 10.0})
    with Ledger.open(dsn, pol) as lg:
        lg.commit(lg.reserve("alice", Cost(epsilon=E(1)), "q"))
        with pytest.raises(BudgetExhausted):
            lg.reserve("alice", Cost(epsilon=E(1, 2)), "q")
        admin.grant(lg, "root", "alice", E(1, 2), reason="deadline")
        lg.commit(lg.reserve("alice", Cost(epsilon=E(1, 4)), "q"))
        open_res = lg.reserve("alice", Cost(epsilon=E(1, 4)), "q0")  # still open at the reset
        [mine, _] = lg.remaining("alice")
        assert mine.epsilon_limit == E(3, 2) and mine.epsilon_remaining == 0
        admin.reset(lg, "root", "alice", reason="new project")
        assert totals(dsn)[("analyst", "alice")] == Cost()
        assert totals(dsn)[("dataset", "testdata")].epsilon == E(3, 2)  # the dataset remembers
        lg.commit(lg.reserve("alice", Cost(epsilon=E(1, 2)), "q"))
        lg.refund(open_res)  # reserved before the reset: the analyst's part was reset already
        assert totals(dsn)[("analyst", "alice")].epsilon == E(1, 2)
        assert totals(dsn)[("dataset", "testdata")].epsilon == E(
            7, 4
        )  # the dataset's is given back
        assert [h.state for h in lg.history("alice")][:2] == ["committed", "refunded"]
    log = _audit(dsn)
    assert [(a, b, c) for a, b, c, _ in log] == [
        ("root", "grant", "alice"),
        ("root", "reset", "alice"),
    ]
    assert log[0][3]["epsilon"] == "1/2" and log[0][3]["reason"] == "deadline"
    assert log[1][3]["epsilon_spent"] == "3/2"  # what was reset is kept
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("DELETE FROM dpsql.admin_audit")


def test_dataset_grant_and_errors(make_db: Callable[[str], str]) -> None:
    dsn = make_db("admin")
    with Ledger.open(dsn, policy(dataset_budget={"epsilon": 1.0})) as lg:
        admin.grant(lg, "root", None, E(2), E(1, 10**6))
        [_, ds] = lg.remaining("alice")
        assert ds.epsilon_limit == 3 and float(ds.delta_limit) == 1e-6
        with pytest.raises(InvalidParameter):
            admin.grant(lg, "root", "alice", E(-1), E(0))
        with pytest.raises(InvalidParameter):
            admin.grant(lg, "root", "alice", E(0), E(0))
        with pytest.raises(UndefinedObject):
            admin.grant(lg, "root", "mallory", E(1), E(0))
    with Ledger.open(make_db("admin"), policy()) as lg, pytest.raises(UndefinedObject):
        admin.reset(lg, "root", None)


def _cli(pol: Path, dsn: str, *argv: str) -> int:
    from dpsql.cli import main

    return main(["budget", "--policy", str(pol), "--ledger", dsn, *argv])


def test_cli_show_grant_reset(
    make_db: Callable[[str], str], make_policy: PolicyMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = make_db("admin")
    pol = make_policy(
        "admin",
        base={"dataset": "testdata"},
        analysts={
            "alice": {"budget": {"epsilon": 1.0, "delta": 1.0e-6}},
            "bob": {"budget": {"epsilon": 2.0}},
        },
        budget={"epsilon": 2.5},
    ).path
    assert _cli(pol, dsn, "show") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["budget", "name", "period"]
    assert [line.split()[:2] for line in out[1:]] == [
        ["analyst", "alice"],
        ["analyst", "bob"],
        ["dataset", "testdata"],
    ]
    assert (
        _cli(
            pol,
            dsn,
            "grant",
            "--analyst",
            "bob",
            "--epsilon",
            "1/2",
            "--reason",
            "r",
            "--actor",
            "ops",
        )
        == 0
    )
    assert "2.5" in capsys.readouterr().out
    assert _cli(pol, dsn, "reset", "--dataset", "--actor", "ops") == 0
    assert [(a, b, c) for a, b, c, _ in _audit(dsn)] == [
        ("ops", "grant", "bob"),
        ("ops", "reset", "testdata"),
    ]
    assert _cli(pol, dsn, "grant", "--analyst", "bob", "--epsilon", "lots") == 1
    assert "not a number" in capsys.readouterr().err


def test_repeats_flow_with_canonical_keys(make_db: Callable[[str], str]) -> None:
    """The engine's flow: identical answers for free on trivial rewrites; new epsilon is charged."""
    dsn = make_db("admin")

    def ask(lg: Ledger, q: str, eps: Fraction) -> tuple[bytes, bool]:
        key = cache_key(q, [], eps, 0, "laplace")
        hit = lg.lookup("alice", key)
        if hit is not None:
            return hit, True
        res = lg.reserve("alice", Cost(epsilon=eps), canonical(q).digest[:16])
        payload = f"noisy {uuid.uuid4()}".encode()
        return lg.commit(res, key, payload) or payload, False

    with Ledger.open(dsn, policy()) as lg:
        first, cached = ask(lg, "SELECT count(*) AS n FROM people p WHERE p.age > 30", E(1, 4))
        assert not cached
        for q in (
            "SELECT count(*) AS n FROM people p WHERE p.age > 30",
            "select COUNT(*) from PEOPLE as x where (30 < x.age) and 1 = 1",
        ):
            assert ask(lg, q, E(1, 4)) == (first, True)
        assert totals(dsn)[("analyst", "alice")].epsilon == E(1, 4)
        other, cached = ask(lg, "SELECT count(*) FROM people WHERE age > 30", E(1, 2))
        assert not cached and other != first
        assert totals(dsn)[("analyst", "alice")].epsilon == E(3, 4)
        states = [h.cached for h in lg.history("alice")]
        assert states == [False, True, True, False]


def test_migrates_an_older_ledger(
    make_db: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version-2 ledger (before the filter) gets the filter's columns; its totals are kept and
    its untracked Renyi total is read as sum epsilon + alpha sum rho (an upper bound)."""
    dsn = make_db("admin")
    with monkeypatch.context() as m, psycopg.connect(dsn, autocommit=True) as conn:
        m.setattr(ledger_schema, "MIGRATIONS", ledger_schema.MIGRATIONS[:2])
        m.setattr(ledger_schema, "VERSION", 2)
        assert ledger_schema.migrate(conn, "dpsql") == 2
        conn.execute(
            "INSERT INTO dpsql.budget (dataset, kind, name, period_start, epsilon_spent,"
            " rho_spent, releases) VALUES ('testdata', 'analyst', 'alice', 'epoch', '1/3',"
            " '1/1000', 2)"
        )
    pol = policy({"alice": {"epsilon": 1.0, "delta": 1e-6}})
    # a row with no order yet: the period takes the default, the main order for 3/4 of the
    # conversion delta with the more orders beside it (dpsql.budget.filter.extra_orders)
    alpha = default_order(E(1), E(3, 8 * 10**6))
    more = " ".join(f"{o}/1" for o in (32, 64, 128, 256))
    with Ledger.open(dsn, pol) as lg:
        with psycopg.connect(dsn) as conn:
            assert ledger_schema.current_version(conn, "dpsql") == ledger_schema.VERSION == 6
        [st] = lg.remaining("alice")
        bound = E(1, 3) + alpha / 1000
        assert st.renyi_order == alpha and E(st.renyi_spent) - E(1, 10**12) < bound
        assert bound <= E(st.renyi_spent)  # shown rounded up
        lg.commit(lg.reserve("alice", Cost(epsilon=E(1, 100)), "new"))
        with psycopg.connect(dsn) as conn:
            renyi, order = conn.execute(
                "SELECT renyi_spent, renyi_order FROM dpsql.budget"
            ).fetchone()  # type: ignore[misc]
        assert order == f"{alpha.numerator}/{alpha.denominator} {more}"
        assert E(renyi) == E(1, 3) + alpha / 1000 + min(E(1, 100), alpha / 2 / 100**2)
        assert totals(dsn)[("analyst", "alice")] == Cost(E(1, 3) + E(1, 100), rho=E(1, 1000))


def test_other_roles_cannot_read_the_ledger(make_db: Callable[[str], str]) -> None:
    dsn = make_db("admin")
    Ledger.open(dsn, policy()).close()
    role = f"analyst_{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
        info.update(user=role, password=password)
        with psycopg.connect(**info) as conn:  # type: ignore[arg-type]
            for table in ("budget", "release", "answer", "admin_audit"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(f"SELECT * FROM dpsql.{table}")
                conn.rollback()
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
