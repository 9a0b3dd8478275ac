"""Round trips to PostgreSQL per fresh private statement, per shape (``bench/engine.py``'s
:data:`FRESH`), in one process: the engine alone (no ledger) and with the ledger.

    python bench/trips.py [--tree REV[=POLICY] ...] [--repeat K] [--policy FILE] [--show]
    python bench/trips.py --policy bench/policy_5e50bd1.yaml --tree 5e50bd1 \
        --tree dccf066=bench/policy_5e50bd1.yaml   # the same bounds in every tree

A round trip is one exchange the client waits on (a simple Query; Parse/Bind/Describe/Execute/
Sync for one psycopg ``execute``; a Parse or a Describe alone; in pipeline mode, each Sync and flush request), counted at psycopg's libpq
binding for every connection the process opens (the engine's pool and the ledger's), so
nothing of dpsql is patched. Counts are per statement over ``--repeat`` new texts after one
warm-up text (the first of a process reads what later ones reuse). ``--tree``: also at git
revisions (or checkouts), each in its own process on the same PostgreSQL (each with its own
ledger schema), under its own demo policy or the one named; ``--show`` prints
the statements of the last text of each shape.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(
    0, os.environ.get("DPSQL_BENCH_TREE") or str(Path(__file__).resolve().parent.parent)
)


TRIPS = ("exec_", "exec_params", "exec_prepared", "prepare", "describe_prepared",
         "describe_portal", "send_query", "send_query_params", "send_query_prepared",
         "send_prepare", "send_describe_prepared", "send_describe_portal")  # fmt: skip


def _traced() -> list[tuple[str, str]]:
    """Record every round trip of every psycopg connection of this process, as (call, text):
    the process runs psycopg's pure-Python libpq binding (``PSYCOPG_IMPL=python``, set by
    :func:`main`), whose ``PGconn`` methods are wrapped here (nothing of dpsql is patched).
    Each call is one round trip (no pipeline mode)."""
    from psycopg.pq import pq_ctypes

    calls: list[tuple[str, str]] = []
    for name in TRIPS:
        real = getattr(pq_ctypes.PGconn, name)

        def wrapped(self, *a, _real=real, _name=name, **kw):  # type: ignore[no-untyped-def]
            text = a[0] if a and isinstance(a[0], bytes) else b""
            if _name in ("prepare", "send_prepare") and len(a) > 1:
                text = a[1]
            piped = "(piped) " if self.pipeline_status else ""
            calls.append((piped + _name, text.decode(errors="replace")))
            return _real(self, *a, **kw)

        setattr(pq_ctypes.PGconn, name, wrapped)
    for name in ("pipeline_sync", "send_flush_request"):  # a pipeline's waits
        real = getattr(pq_ctypes.PGconn, name)

        def waited(self, _real=real, _name=name):  # type: ignore[no-untyped-def]
            calls.append((_name, ""))
            return _real(self)

        setattr(pq_ctypes.PGconn, name, waited)
    return calls


def _trips(calls: list[tuple[str, str]]) -> int:
    """Round trips: each call outside a pipeline, each pipeline's sync."""
    return sum(not k.startswith("(piped)") for k, _ in calls)


def count_json(dsn: str, policy: str, repeat: int, show: bool) -> None:
    calls = _traced()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from engine import FRESH

    from dpsql.engine import Engine
    from dpsql.policy import load_policy
    from dpsql.session import SessionContext

    pol = load_policy(policy)
    out: dict[str, dict[str, float]] = {}
    shown: dict[str, list[str]] = {}
    for with_ledger in (False, True):
        ledger = None
        if with_ledger:
            from dpsql.budget.ledger import Ledger

            ledger = Ledger.open(dsn, pol, schema=os.environ.get("DPSQL_TRIPS_SCHEMA", "dpsql"))
        engine = Engine(pol, dsn, ledger=ledger, pool_size=1)
        session = SessionContext(analyst="analyst")
        session.epsilon = 0.001  # type: ignore[assignment]
        try:
            for i, (name, shape) in enumerate(FRESH.items()):
                base = 2_000_000 + 100_000 * with_ledger + 1000 * i + os.getpid() % 997
                engine.execute(engine.prepare(shape.format(k=base), "analyst"), session)
                before = mark = len(calls)
                for j in range(repeat):
                    text = shape.format(k=base + 1 + j)
                    mark = len(calls)
                    engine.execute(engine.prepare(text, "analyst"), session)
                trips = _trips(calls[before:])
                out.setdefault(name, {})["ledger" if with_ledger else "engine"] = trips / repeat
                if show:
                    shown[f"{name} ({'ledger' if with_ledger else 'engine'})"] = [
                        f"{k}: {' '.join(t.split())[:160]}" for k, t in calls[mark:]
                    ]
        finally:
            engine.close()
            if ledger is not None:
                ledger.close()
    print(json.dumps({"trips": out, "shown": shown}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", action="append", default=[],
                    help="also at this git revision (REV or REV=POLICY: under that policy)")  # fmt: skip
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--policy", help="this tree's policy (default: its demo policy)")
    ap.add_argument("--show", action="store_true", help="print each shape's statements")
    ap.add_argument("--count-json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    dsn = os.environ.get("DPSQL_BENCH_DSN")
    if args.count_json:
        assert dsn and args.policy
        count_json(dsn, args.policy, args.repeat, args.show)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from proxy_compare import per_tree_json

    results = per_tree_json(
        __file__,
        args.tree,
        args.policy,
        lambda policy: (
            ["--count-json", "--repeat", str(args.repeat), "--policy", policy]
            + (["--show"] if args.show else [])
        ),
        lambda i: {"PSYCOPG_IMPL": "python", "DPSQL_TRIPS_SCHEMA": f"trips_{i}"},
    )
    labels = list(results)
    print("| fresh shape | " + " | ".join(f"{x} engine | {x} +ledger" for x in labels) + " |")
    print("|---|" + "---|---|" * len(labels))
    for name in results["now"]["trips"]:
        cells = []
        for x in labels:
            t = results[x]["trips"].get(name, {})
            cells += [
                f"{t.get('engine', float('nan')):.1f}",
                f"{t.get('ledger', float('nan')):.1f}",
            ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.show:
        for x in labels:
            for name, msgs in results[x]["shown"].items():
                print(f"\n## {x}: {name}")
                for m in msgs:
                    print("  ", m)


if __name__ == "__main__":
    main()
