"""Prometheus metrics of one ``dpsql serve`` process (``--metrics-listen host:port``, path
``/metrics``).

Statement counters and latencies are recorded where every statement's log line is written
(:func:`dpsql.wire.log.log_statement`); sessions, the upstream pools and the budgets are read
when Prometheus scrapes (:class:`StateCollector`). Labels are bounded: statement kinds, SQLSTATEs
and the policy's analysts (a name that is not an analyst never reaches a statement).

Metrics (``dpsql_`` prefix):

* ``statements_total{kind, sqlstate}``: statements by kind (private, public, catalog, session,
  refused ...) and outcome (``00000`` when answered);
* ``statement_seconds{kind}``: latency histogram;
* ``epsilon_charged_total{analyst}``, ``delta_charged_total{analyst}``: privacy spent on answers;
* ``cached_answers_total{analyst}``: free repeats of stored answers;
* ``budget_epsilon_remaining{analyst, budget}``: from the ledger, per analyst and the dataset;
* ``sessions``, ``connections``: authenticated sessions, open connections;
* ``upstream_pool_connections{pool, state}``, ``upstream_connections_lost_total{pool}``.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

log = logging.getLogger("dpsql.metrics")

REGISTRY = CollectorRegistry(auto_describe=True)
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class StatementStats(Collector):
    """Per-statement counters in plain dictionaries: :func:`observe` runs once per statement on
    the server's event loop (about 3 us, against 14 us for prometheus-client's locked children);
    a scrape copies them."""

    def __init__(self) -> None:
        # (kind, outcome) -> per-bucket latency counts, +Inf, sum of seconds, statements
        self.by_outcome: dict[tuple[str, str], list[float]] = {}
        self.epsilon: dict[str, float] = {}
        self.delta: dict[str, float] = {}
        self.cached: dict[str, int] = {}

    def observe(self, fields: dict[str, Any]) -> None:
        """Count one statement from its log line's fields (``kind``, ``outcome``,
        ``latency_ms``, ``epsilon``, ``delta``, ``cached``, ``analyst``: every line has them)."""
        key = (fields["kind"], fields["outcome"])
        rec = self.by_outcome.get(key)
        if rec is None:
            rec = self.by_outcome[key] = [0.0] * (len(BUCKETS) + 3)
        seconds = fields["latency_ms"] / 1000
        rec[bisect_left(BUCKETS, seconds)] += 1
        rec[-2] += seconds
        rec[-1] += 1
        if fields["epsilon"] or fields["delta"] or fields["cached"]:
            self._charged(fields["analyst"], fields["epsilon"], fields["delta"], fields["cached"])

    def _charged(self, analyst: str, eps: float, delta: float, cached: bool) -> None:
        if eps > 0:
            self.epsilon[analyst] = self.epsilon.get(analyst, 0.0) + eps
        if delta > 0:
            self.delta[analyst] = self.delta.get(analyst, 0.0) + delta
        if cached:
            self.cached[analyst] = self.cached.get(analyst, 0) + 1

    def collect(self) -> Iterator[Metric]:
        st = CounterMetricFamily("dpsql_statements", "Statements by kind and outcome (SQLSTATE, "
                                 "00000: ok)", labels=["kind", "sqlstate"])  # fmt: skip
        by_kind: dict[str, list[float]] = {}  # kind -> per-bucket counts, +Inf, sum
        for (kind, outcome), rec in _copy(self.by_outcome).items():
            rec = list(rec)
            st.add_metric([str(kind), "00000" if outcome == "ok" else str(outcome)], int(rec[-1]))
            acc = by_kind.setdefault(kind, [0.0] * (len(BUCKETS) + 2))
            for i, n in enumerate(rec[:-1]):
                acc[i] += n
        yield st
        lat = HistogramMetricFamily("dpsql_statement_seconds", "Statement latency by kind",
                                    labels=["kind"])  # fmt: skip
        for kind, counts in by_kind.items():
            cumulative, buckets = 0.0, []
            for bound, n in zip((*map(str, BUCKETS), "+Inf"), counts[:-1], strict=True):
                cumulative += n
                buckets.append((bound, cumulative))
            lat.add_metric([kind], buckets, counts[-1])
        yield lat
        for name, doc, values in (
            ("dpsql_epsilon_charged", "Epsilon charged for answers, by analyst", self.epsilon),
            ("dpsql_delta_charged", "Delta charged for answers, by analyst", self.delta),
            ("dpsql_cached_answers", "Free repeats of stored answers, by analyst", self.cached),
        ):
            fam = CounterMetricFamily(name, doc, labels=["analyst"])
            for analyst, v in _copy(values).items():
                fam.add_metric([analyst], v)
            yield fam


def _copy(d: dict[Any, Any]) -> dict[Any, Any]:
    """A copy of a dictionary the event loop may be adding to meanwhile."""
    while True:
        try:
            return dict(d)
        except RuntimeError:  # changed size during the copy
            continue


STATS = StatementStats()
REGISTRY.register(STATS)
observe = STATS.observe


class StateCollector(Collector):
    """Values read at scrape time from the running server (sessions, pools, budgets).

    Args:
        sessions: authenticated sessions now; connections: open connections now.
        pools: name -> psycopg_pool-style ``get_stats()`` (pool_size, pool_available,
            requests_waiting, connections_lost).
        budgets: () -> [(analyst, budget name, epsilon remaining)] (read from the ledger, at
            most every ``budget_every_s`` seconds).
    """

    def __init__(
        self,
        sessions: Callable[[], int],
        connections: Callable[[], int],
        pools: Callable[[], dict[str, dict[str, int]]],
        budgets: Callable[[], Iterable[tuple[str, str, float]]] | None = None,
        budget_every_s: float = 2.0,
    ) -> None:
        self._sessions, self._connections, self._pools = sessions, connections, pools
        self._budgets, self._every = budgets, budget_every_s
        self._cached: tuple[float, list[tuple[str, str, float]]] = (-1e18, [])
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("dpsql_sessions", "Authenticated sessions", self._sessions())
        yield GaugeMetricFamily("dpsql_connections", "Open client connections",
                                self._connections())  # fmt: skip
        conns = GaugeMetricFamily("dpsql_upstream_pool_connections",
                                  "Upstream pool connections by state", labels=["pool", "state"])  # fmt: skip
        lost = CounterMetricFamily("dpsql_upstream_connections_lost",
                                   "Pooled connections found dead", labels=["pool"])  # fmt: skip
        for name, st in self._pools().items():
            conns.add_metric([name, "open"], st.get("pool_size", 0))
            conns.add_metric([name, "idle"], st.get("pool_available", 0))
            conns.add_metric([name, "waiting"], st.get("requests_waiting", 0))
            lost.add_metric([name], st.get("connections_lost", 0))
        yield conns
        yield lost
        if self._budgets is not None:
            remaining = GaugeMetricFamily("dpsql_budget_epsilon_remaining",
                                          "Epsilon left in the current period",
                                          labels=["analyst", "budget"])  # fmt: skip
            for analyst, budget, eps in self._read_budgets():
                remaining.add_metric([analyst, budget], eps)
            yield remaining

    def _read_budgets(self) -> list[tuple[str, str, float]]:
        assert self._budgets is not None
        with self._lock:
            at, rows = self._cached
            if time.monotonic() - at > self._every:
                try:
                    rows = list(self._budgets())
                except Exception as e:  # a scrape must not fail because the ledger does
                    log.warning("budgets not read for /metrics: %s", e)
                self._cached = (time.monotonic(), rows)
            return rows


_STATE: StateCollector | None = None


def use_state(collector: StateCollector) -> None:
    """Report ``collector``'s values (the serving process's; replaces an earlier one)."""
    global _STATE
    if _STATE is not None:
        REGISTRY.unregister(_STATE)
    REGISTRY.register(collector)
    _STATE = collector


def serve_metrics(host: str, port: int) -> int:
    """Serve ``/metrics`` on ``host:port`` in a daemon thread; returns the bound port."""
    server, _ = start_http_server(port, addr=host, registry=REGISTRY)
    return int(server.server_address[1])
