"""A separate dpsql-like process for the ledger race and crash tests.

    python -m tests.integration.budget.ledger_worker race  DSN SCHEMA POLICY_JSON THREADS SEED
    python -m tests.integration.budget.ledger_worker crash DSN SCHEMA POLICY_JSON THREADS
    python -m tests.integration.budget.ledger_worker lock  DSN SCHEMA

``race``: prints ``ready``, waits for ``go`` on stdin, then THREADS threads reserve until their
budgets are exhausted (see :func:`race_loop`); prints a JSON summary.
``crash``: THREADS threads reserve, print ``reserved ID``, commit, print ``received ID`` (the
moment an answer would leave dpsql), forever, until the parent kills the process.
``lock``: holds the row lock of every budget row in an open transaction, prints ``locked`` and
waits to be killed.
"""

from __future__ import annotations

import json
import random
import sys
import threading
from fractions import Fraction

import psycopg

from dpsql.budget.ledger import Ledger
from dpsql.dp.accounting import Cost
from dpsql.errors import BudgetExhausted
from dpsql.policy.model import Policy

MICRO = Fraction(1, 10**6)
# The costs a racing thread draws from: pure, partition selection (epsilon + delta), Gaussian.
COSTS = (
    Cost(epsilon=Fraction(1, 10)),
    Cost(epsilon=Fraction(1, 20), delta=MICRO / 10),
    Cost(rho=Fraction(1, 200)),
)


def race_loop(ledger: Ledger, analysts: list[str], seed: int, refund_every: int) -> dict[str, int]:
    """Reserve random costs for random analysts until no cost fits any of them.

    Every ``refund_every``-th success is refunded (0: never). Returns counts of outcomes.
    """
    rng = random.Random(seed)  # not noise: test scheduling
    out = {"committed": 0, "refunded": 0, "refused": 0}
    exhausted: set[tuple[str, int]] = set()
    options = [(a, i) for a in analysts for i in range(len(COSTS))]
    while len(exhausted) < len(options):
        a, i = rng.choice([o for o in options if o not in exhausted])
        try:
            res = ledger.reserve(a, COSTS[i], f"race-{i}", delta_for_rho=MICRO)
        except BudgetExhausted:
            out["refused"] += 1
            exhausted.add((a, i))
            continue
        n = out["committed"] + out["refunded"] + 1
        if refund_every and n % refund_every == 0:
            ledger.refund(res)
            out["refunded"] += 1
        else:
            ledger.commit(res)
            out["committed"] += 1
    return out


def _threads(n: int, target: object) -> list[threading.Thread]:
    return [threading.Thread(target=target, args=(k,)) for k in range(n)]  # type: ignore[arg-type]


def race(dsn: str, schema: str, policy: Policy, threads: int, seed: int) -> None:
    with Ledger.open(dsn, policy, schema, pool_size=threads) as ledger:
        results: list[dict[str, int]] = []

        def run(k: int) -> None:
            results.append(race_loop(ledger, sorted(policy.analysts), seed * 1000 + k, 5))

        workers = _threads(threads, run)
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("no go")
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    total = {k: sum(r[k] for r in results) for k in ("committed", "refunded", "refused")}
    print(json.dumps(total), flush=True)


def crash(dsn: str, schema: str, policy: Policy, threads: int) -> None:
    ledger = Ledger.open(dsn, policy, schema, pool_size=threads)
    lock = threading.Lock()
    analyst = sorted(policy.analysts)[0]

    def say(line: str) -> None:
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def run(k: int) -> None:
        while True:
            res = ledger.reserve(analyst, Cost(epsilon=Fraction(1, 1000)), f"crash-{k}")
            say(f"reserved {res.id}")
            ledger.commit(res, f"key-{res.id}", b"noisy answer")
            say(f"received {res.id}")

    for t in _threads(threads, run):
        t.daemon = True
        t.start()
    threading.Event().wait()


def hold_locks(dsn: str, schema: str) -> None:
    conn = psycopg.connect(dsn)
    conn.execute(f"SELECT * FROM {schema}.budget FOR UPDATE").fetchall()
    print("locked", flush=True)
    threading.Event().wait()


def main(argv: list[str]) -> None:
    mode, dsn, schema = argv[:3]
    if mode == "lock":
        hold_locks(dsn, schema)
        return
    policy = Policy.model_validate(json.loads(argv[3]))
    if mode == "race":
        race(dsn, schema, policy, int(argv[4]), int(argv[5]))
    elif mode == "crash":
        crash(dsn, schema, policy, int(argv[4]))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1:])
