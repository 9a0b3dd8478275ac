"""Test-only helpers. Nothing here is importable from the dpsql package."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.dp.bounds import Selection
from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.dp.noise_source import CSPRNG, NoiseSource
from dpsql.dp.partition import PartitionSelection
from dpsql.dp.quantiles import Mode, Quantile
from dpsql.engine import Engine
from dpsql.session import SessionContext

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def served_engine(
    policy: Any,
    upstream: str,
    *,
    grace_s: float = 2,
    ledger: Any | None = None,
    noise: NoiseSource = CSPRNG,
) -> Iterator[Any]:
    """A real Engine on ``upstream`` (charging ``ledger`` if given, drawing from ``noise``)
    behind an in-process wire server on a free port; yields the
    :class:`~dpsql.server.run.ServerThread` (its ``port``). Both are closed at exit (the ledger
    is the caller's)."""
    from dpsql.server.run import ServerThread
    from dpsql.wire.server import ServerConfig

    engine = Engine(policy, upstream, ledger, pool_size=2, noise=noise)
    srv = ServerThread(engine, policy, ServerConfig(port=0, shutdown_grace_s=grace_s)).start()
    try:
        yield srv
    finally:
        srv.stop()
        engine.close()


def demo_db_with_defaults(make_db: Any, prefix: str, settings: Mapping[str, str]) -> str:
    """A fresh demo database whose new connections default to ``settings`` (ALTER DATABASE ...
    SET, as a data owner may have configured it); checked in force on a new connection."""
    import psycopg
    from psycopg import sql

    from dpsql.demo import load_demo

    dsn = make_db(prefix)
    load_demo(dsn)
    name = sql.Identifier(str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]))
    with psycopg.connect(dsn, autocommit=True) as conn:
        for k, v in settings.items():
            conn.execute(sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                name, sql.Identifier(k), sql.Literal(v)))  # fmt: skip
    with psycopg.connect(dsn) as conn:
        for k, v in settings.items():
            assert conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(k))).fetchone() == (v,)
    return dsn


def db_name(dsn: str) -> str:
    """The database a DSN names: the one `dpsql serve` on that upstream serves (clients must
    name it; any other is 3D000)."""
    import psycopg

    return str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])


def analyst_dsn(port: int, user: str = "analyst", password: str = "analyst") -> str:
    """The DSN of ``user`` on a local dpsql server (the demo database)."""
    return f"host=127.0.0.1 port={port} user={user} password={password} dbname=demo"


class ExactNoise:
    """A zero-noise :class:`~dpsql.dp.noise_source.NoiseSource`: the exact, un-noised answer
    tests compare with (the engine's former test-only switch answered the same). Injected where
    a test builds an engine (``Engine(..., noise=EXACT)``, the ``exact_noise`` fixture) or calls
    a release stage; the product has no way to name it. Charges and intervals are the mechanism's own, unchanged (a
    zero-noise engine reports the real noise's error bars).

    * additive noise: the values as they are;
    * partition selection: every group with a unit (not the noisy threshold);
    * quantiles, interval ends, the mode: the best candidate (the first among ties);
    * contribution bounds: the best bucket, the guard on the exact unit count
      (``TopRank.exact`` / ``TailRank.exact``).
    """

    def add(self, mech: Laplace | Gaussian, values: np.ndarray) -> np.ndarray:
        return np.asarray(values, dtype=np.float64)

    def keep(self, selection: PartitionSelection, unit_counts: np.ndarray) -> np.ndarray:
        return np.asarray(unit_counts) >= 1

    def pick(self, mech: Quantile, utilities: np.ndarray) -> np.ndarray:
        return np.asarray(np.argmax(utilities, axis=1), dtype=np.int64)

    def mode(self, mech: Mode, counts: np.ndarray) -> np.ndarray:
        return np.asarray(np.argmax(counts, axis=1), dtype=np.int64)

    def bound(self, selection: Selection, counts: np.ndarray) -> int:
        return selection.exact(counts)


EXACT: NoiseSource = ExactNoise()
"""The zero-noise source (see :class:`ExactNoise`)."""


def binom_min_successes(n: int, p: float, alpha: float = 1e-6) -> int:
    """The largest k with P(Binomial(n, p) < k) <= alpha: fewer successes fail a test at level alpha."""
    cdf = 0.0
    for k in range(n + 1):
        term = math.exp(
            math.lgamma(n + 1)
            - math.lgamma(k + 1)
            - math.lgamma(n - k + 1)
            + k * math.log(p)
            + (n - k) * math.log1p(-p)
        )
        if cdf + term > alpha:
            return k
        cdf += term
    return n


def start_serve(
    args: Sequence[str],
    *,
    listen: str | None = "127.0.0.1:0",
    env: Mapping[str, str] | None = None,
    port_file: Path | None = None,
    timeout: float = 60.0,
    **popen: Any,
) -> tuple[subprocess.Popen[Any], int]:
    """Start ``python -m dpsql serve ARGS`` and return it with the port it bound, once it accepts.

    The server listens on ``listen`` (default: a free port the kernel picks; None: the caller's
    flags, environment or policy say where) and writes the bound port to ``--port-file``: no
    port is picked by the test and released for the server to reuse (another process could take
    it in between). ``env`` defaults to this process's environment; ``popen`` goes to Popen
    (stdout, stderr, text ...). On failure the process is killed and its output shown.
    """
    port_file = port_file or Path(tempfile.mkdtemp(prefix="dpsql-serve-")) / "port"
    port_file.unlink(missing_ok=True)  # a previous run's must not be read as this one's
    cmd = [sys.executable, "-m", "dpsql", "serve", *args, "--port-file", str(port_file)]
    if listen is not None:
        cmd += ["--listen", listen]
    full_env = {**(os.environ if env is None else env), "PYTHONPATH": str(ROOT)}
    proc: subprocess.Popen[Any] = subprocess.Popen(cmd, cwd=ROOT, env=full_env, **popen)
    deadline = time.monotonic() + timeout
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out = _output(proc, popen.get("stdout"))
            raise AssertionError(
                f"dpsql serve exited with {proc.returncode} or did not listen within {timeout} s"
                f"\n{out[-4000:]}"
            )
        time.sleep(0.05)
    return proc, int(port_file.read_text())


def _output(proc: subprocess.Popen[Any], stdout: Any) -> str:
    """What a dead server wrote: from its pipe, or from the file its output went to."""
    out: Any = ""
    if proc.stdout is not None:
        out = proc.communicate()[0]
    elif hasattr(stdout, "seek") and hasattr(stdout, "read"):
        proc.wait()
        stdout.flush()
        stdout.seek(0)
        out = stdout.read()
    else:
        proc.wait()
    return out.decode(errors="replace") if isinstance(out, bytes) else str(out or "")


def interval_coverage(engine: Engine, plan: Any, row: Sequence[Any], sql: str, draws: int) -> int:
    """How many of ``draws`` releases' 95% intervals of the private row ``row`` (of ``plan``) hold
    the truth: ``sql`` run as written on PostgreSQL (the first group's value, or the only row's).
    Grouped, the row is released as ``draws`` independent groups of one release; ungrouped,
    ``draws`` releases of the row. Fresh CSPRNG noise each time; only the noise is redrawn."""
    from dpsql.execute.noise import release

    truths = {
        (r[0] if len(r) > 1 else None): float(r[-1])
        for r in engine.backend.run(sql, private=False).rows
    }
    if plan.analysis.group_keys:
        truth = truths[row[0]]
        keyed = [(str(i), *row[1:]) for i in range(draws)]
        ivs = [iv[0] for iv in release(plan, keyed, ["text"], None, 0.95, CSPRNG).intervals]
    else:
        truth = truths[None]
        ivs = [
            release(plan, [tuple(row)], [], None, 0.95, CSPRNG).intervals[0][0]
            for _ in range(draws)
        ]
    return sum(1 for iv in ivs if iv is not None and iv[0] <= truth <= iv[1])


def release_coverage(engine: Engine, sql: str, plan: Any, draws: int, broken: bool = False) -> int:
    """:func:`interval_coverage` of ``plan`` (a flat statement's, COUNT/SUM/AVG with bias
    estimates) for ``sql``: its bounded SQL run once, its first row released ``draws`` times.
    ``broken``: the noise-only twin, the same plan without its removed-mass estimate."""
    import dataclasses

    used = dataclasses.replace(plan, bias=()) if broken else plan
    prepared = engine.prepare(sql)
    row = engine.backend.run(engine.private_sql(prepared, plan.analysis), private=True).rows[0]
    return interval_coverage(engine, used, row, sql, draws)


class Coverage:
    """The one coverage check of the error-bar tests (flat, joins, trees): an interval at
    ``level`` holds the truth in each of ``draws`` independent releases with probability >=
    ``level``; fewer than :attr:`need` covered has probability <= ``alpha`` under that property
    (the false-failure rate, binomial). :meth:`holds` is the test, :meth:`caught` its broken
    twin's (which must cover fewer)."""

    def __init__(self, draws: int, level: float = 0.95, alpha: float = 1e-6) -> None:
        self.draws, self.level, self.alpha = draws, level, alpha
        self.need = binom_min_successes(draws, level, alpha)

    def holds(self, hits: int, what: str) -> None:
        assert hits >= self.need, f"{what}: {hits} of {self.draws} covered, need {self.need}"

    def caught(self, hits: int, what: str) -> None:
        assert hits < self.need, (
            f"{what}: the broken twin covered {hits} of {self.draws} (a correct interval "
            f"needs {self.need}): the check can't tell it from a correct one"
        )


@contextmanager
def ledgered_engine(policy: Any, dsn: str, prefix: str) -> Iterator[Engine]:
    """An engine over ``dsn`` with a ledger of its own (schema ``<prefix><random>``), closed after."""
    ledger = Ledger.open(dsn, policy, schema=f"{prefix}{uuid.uuid4().hex[:8]}")
    engine = Engine(policy, dsn, ledger, pool_size=2)
    try:
        yield engine
    finally:
        engine.close()
        ledger.close()


def notices_of(engine: Engine, sql: str, epsilon: Fraction = Fraction(1)) -> list[str]:
    """The notices of one private answer to ``sql`` as the ``analyst`` analyst."""
    s = SessionContext("analyst", epsilon)
    return list(engine.execute(engine.prepare(sql, "analyst"), s).notices)


def unrounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turn off the presentation rounding of released values to their noise's resolution
    (dpsql.execute.bias.round_nearest in the release, execute.flat_rounding and
    execute.tree_rounding after the post-processing), for a test that compares the mechanism's
    zero-noise answer with PostgreSQL's exactly: the rounding moves a value by up to 1/200 of its
    stated half-width however little noise was drawn (tests/integration/engine/
    test_flat_rounding.py checks the rounding itself)."""
    from dpsql.execute import finish, noise, tree

    monkeypatch.setattr(noise, "round_nearest", lambda v, hw: v)
    monkeypatch.setattr(finish, "round_outputs", lambda a, rel, rows, rids: list(rows))
    monkeypatch.setattr(tree, "round_rows", lambda names, rows, res: [tuple(r) for r in rows])
