"""The serving process's metrics endpoint: :mod:`dpsql.metrics` fed from a running
:class:`~dpsql.wire.server.Server` (its session counts, the engine's, the ledger's and the fast
path's connection pools, the policy's analysts' budgets)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from psycopg_pool import ConnectionPool

from dpsql.budget.ledger import Ledger
from dpsql.metrics import StateCollector, serve_metrics, use_state
from dpsql.policy.settings import parse_listen
from dpsql.wire.engine_api import UpstreamEngine

if TYPE_CHECKING:
    from dpsql.wire.server import Server


def _psycopg_pool(pool: ConnectionPool) -> dict[str, int]:
    stats = pool.get_stats()
    return {k: int(stats.get(k, 0)) for k in
            ("pool_size", "pool_available", "requests_waiting", "connections_lost")}  # fmt: skip


def start_metrics(server: Server, listen: str) -> int:
    """Serve ``/metrics`` for ``server`` on ``listen`` (host:port; each ``--workers`` process
    on port + its worker number); returns the bound port."""
    engine = server.engine if isinstance(server.engine, UpstreamEngine) else None
    backend = engine.backend if engine is not None else None
    ledger = engine.ledger if engine is not None else None

    def pools() -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        if backend is not None:
            out["engine"] = _psycopg_pool(backend.pool)
        if isinstance(ledger, Ledger):
            out["ledger"] = _psycopg_pool(ledger.pool)
        up = server.upstream
        if up is not None:
            out["fast_path"] = up.stats()
        return out

    def budgets() -> list[tuple[str, str, float]]:
        rows: list[tuple[str, str, float]] = []
        seen_dataset = False
        if ledger is None:
            return rows
        for analyst in server.policy.analysts:
            for st in ledger.remaining(analyst):
                if st.budget == "dataset":
                    if seen_dataset:
                        continue
                    seen_dataset = True
                rows.append((st.name if st.budget == "analyst" else "", st.budget,
                             float(st.epsilon_remaining)))  # fmt: skip
        return rows

    limits = server.limits
    use_state(StateCollector(limits.sessions, limits.connections, pools,
                             budgets if ledger is not None else None))  # fmt: skip
    host, port = parse_listen(listen)
    return serve_metrics(host, port + limits.worker if port else 0)
