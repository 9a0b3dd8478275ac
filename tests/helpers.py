"""Test-only helpers. Nothing here is importable from the dpsql package."""

from __future__ import annotations

import functools
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.clock import SYSTEM_CLOCK, Clock
from dpsql.dp.bounds import Selection
from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.dp.noise_source import CSPRNG, NoiseSource
from dpsql.dp.partition import PartitionSelection
from dpsql.dp.quantiles import Mode, Quantile
from dpsql.engine import Engine
from dpsql.errors import DpsqlError
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
    clock: Clock = SYSTEM_CLOCK,
) -> Iterator[Any]:
    """A real Engine on ``upstream`` (charging ``ledger`` if given, drawing from ``noise``,
    reading ``clock`` as the time) behind an in-process wire server on a free port; yields the
    :class:`~dpsql.server.run.ServerThread` (its ``port``). Both are closed at exit (the ledger
    is the caller's)."""
    from dpsql.server.run import ServerThread
    from dpsql.wire.server import ServerConfig

    engine = Engine(policy, upstream, ledger, pool_size=2, noise=noise, clock=clock)
    srv = ServerThread(engine, policy, ServerConfig(port=0, shutdown_grace_s=grace_s)).start()
    try:
        yield srv
    finally:
        srv.stop()
        engine.close()


@contextmanager
def served_with_ledger(policy: Any, upstream: str, ledger_dsn: str) -> Iterator[Any]:
    """:func:`served_engine` charging a ledger of its own, opened in ``ledger_dsn`` (a fresh
    database: each module's charges apart) and closed at exit."""
    ledger = Ledger.open(ledger_dsn, policy)
    try:
        with served_engine(policy, upstream, ledger=ledger) as srv:
            yield srv
    finally:
        ledger.close()


def outcome_and_charges(engine: Engine, ledger: Ledger, sql: str) -> tuple[str, int]:
    """How ``sql`` ended for the analyst "analyst" ('answered' or its SQLSTATE) and how many
    releases it added to the ledger: the red-team pair a neighbour must not tell apart."""
    before = len(ledger.history("analyst"))
    try:
        engine.execute(engine.prepare(sql, "analyst"), SessionContext("analyst", Fraction(1)))
        got = "answered"
    except DpsqlError as e:
        got = e.sqlstate
    return got, len(ledger.history("analyst")) - before


def case_insensitive_collation(conn: Any) -> None:
    """CREATE COLLATION ci, ICU's case-insensitive nondeterministic collation ('a' = 'A'), on
    the psycopg connection ``conn``; the test is skipped on a PostgreSQL without ICU (failed
    under CI, whose PostgreSQL has it)."""
    import psycopg

    try:
        conn.execute(
            "CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', "
            "deterministic = false)"
        )
    except (psycopg.errors.FeatureNotSupported, psycopg.errors.UndefinedFile) as error:
        msg = f"PostgreSQL without ICU: nothing to test ({error})"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)


def slow_db(make_db: Any, name: str) -> str:
    """A fresh database whose private view ``slow`` (``u``, ``x`` in 0..6, 100 rows) takes 50 ms
    a row to read (``slow20``: its first 20 rows): statements that run long enough to be
    cancelled, stopped or timed out while they run."""
    from tests.owner import owner_db  # (it imports this module)

    return owner_db(
        make_db,
        name,
        "CREATE TABLE t (u integer NOT NULL, x numeric)",
        "INSERT INTO t SELECT u, u % 7 FROM generate_series(1, 100) u",
        # volatile: run for each row read
        "CREATE FUNCTION slowly(v numeric) RETURNS numeric VOLATILE LANGUAGE sql "
        "AS 'SELECT pg_sleep(0.05); SELECT v'",
        "CREATE VIEW slow AS SELECT u, slowly(x) AS x FROM t",
        "CREATE VIEW slow20 AS SELECT u, slowly(x) AS x FROM t WHERE u <= 20",
    )


def demo_db_with_defaults(make_demo_db: Any, prefix: str, settings: Mapping[str, str]) -> str:
    """A fresh demo database whose new connections default to ``settings`` (ALTER DATABASE ...
    SET, as a data owner may have configured it); checked in force on a new connection."""
    import psycopg
    from psycopg import sql

    dsn = make_demo_db(prefix)
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


@functools.cache
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


@dataclass(frozen=True)
class Tally:
    """Coverage over the intervals the accuracy notice stands by: ``hits`` of ``usable``
    (an interval it disowns, NULL columns, is not one: :func:`interval_columns`)."""

    hits: int
    usable: int
    drawn: int = 0  # the releases drawn, when a curtailed check stopped early (0: all of them)


def covers(iv: Sequence[float] | None, truth: float) -> bool | None:
    """Whether a released interval holds ``truth`` (None: disowned, both ends NULL). One end
    only (the other disowned, infinite): that end, which the notice stands by at the level."""
    if iv is None:
        return None
    return iv[0] <= truth <= iv[1]


def interval_coverage(
    engine: Engine, plan: Any, row: Sequence[Any], sql: str, draws: int, check: bool = True
) -> Tally:
    """How many of ``draws`` releases' 95% intervals of the private row ``row`` (of ``plan``) hold
    the truth: ``sql`` run as written on PostgreSQL (the first group's value, or the only row's).
    Grouped, the row is released as ``draws`` independent groups of one release; ungrouped,
    ``draws`` releases of the row. Fresh CSPRNG noise each time; only the noise is redrawn.

    Counted over the intervals the notice stands by: an over-cap alarm (false, at most 1e-3 a
    release) disowns an AVG's interval (None). The alarm reads its own noise draw, independent
    of the answer's and the estimates', so leaving those out biases no count; grouped, one
    release holds every draw, so one whose intervals are all disowned is drawn again (at most
    4 times: 4 false alarms in a row have probability <= 1e-12). ``check``: each release's
    columns are NULL exactly where its notice says so (:func:`release_intervals`; off for a
    broken twin shown with every interval kept, :func:`kept`)."""
    from dpsql.execute.noise import release

    truths = {
        (r[0] if len(r) > 1 else None): float(r[-1])
        for r in engine.backend.run(sql, private=False).rows
    }
    stat = plan.analysis.statistics[0]

    def drawn(rows: list[tuple[Any, ...]], types: list[str]) -> list[Any]:
        rel = release(plan, rows, types, None, 0.95, CSPRNG)
        if check and stat.func not in ("quantile", "mode"):  # NULL exactly where it says so
            release_intervals(rel, 0, stat.sql)
        return [iv[0] for iv in rel.intervals]

    if plan.analysis.group_keys:
        truth = truths[row[0]]
        keyed = [(str(i), *row[1:]) for i in range(draws)]
        for _ in range(4):
            ivs = drawn(keyed, ["text"])
            if any(iv is not None for iv in ivs):
                break
    else:
        truth = truths[None]
        ivs = [drawn([tuple(row)], [])[0] for _ in range(draws)]
    got = [c for iv in ivs if (c := covers(iv, truth)) is not None]
    return Tally(sum(got), len(got))


def release_coverage(
    engine: Engine, sql: str, plan: Any, draws: int, broken: bool = False
) -> Tally:
    """:func:`interval_coverage` of ``plan`` (a flat statement's, COUNT/SUM/AVG with bias
    estimates) for ``sql``: its bounded SQL run once, its first row released ``draws`` times.
    ``broken``: the noise-only twin, the same plan without its removed-mass estimate."""
    import dataclasses

    used = dataclasses.replace(plan, bias=()) if broken else plan
    prepared = engine.prepare(sql)
    row = engine.backend.run(engine.private_sql(prepared, plan.analysis), private=True).rows[0]
    if not broken:
        return interval_coverage(engine, used, row, sql, draws)
    with pytest.MonkeyPatch.context() as m:  # its notice disowns the noise-only interval now:
        kept(m)  # shown as before, to be caught
        return interval_coverage(engine, used, row, sql, draws, check=False)


class Coverage:
    """The one coverage check of the error-bar tests (flat, joins, trees): an interval at
    ``level`` holds the truth in each of ``draws`` independent releases with probability >=
    ``level``; fewer than :attr:`need` covered has probability <= ``alpha`` under that property
    (the false-failure rate, binomial). :meth:`holds` is the test, :meth:`caught` its broken
    twin's (which must cover fewer).

    Given a :class:`Tally` (the intervals the notice stands by), the bound is of its ``usable``
    count, chosen by draws independent of the answers' (the over-cap alarm's): fewer than
    ``need(usable)`` covered has probability <= ``alpha`` given that count. At least 90% of the
    draws must be usable (more than 10% disowned by false alarms of rate <= 1e-3: < 1e-12 at
    100 draws or more)."""

    def __init__(self, draws: int, level: float = 0.95, alpha: float = 1e-6) -> None:
        self.draws, self.level, self.alpha = draws, level, alpha
        self.need = binom_min_successes(draws, level, alpha)

    def _of(self, got: int | Tally, what: str) -> tuple[int, int, int]:
        if isinstance(got, int):
            return got, self.draws, self.need
        drawn = got.drawn or self.draws
        assert got.usable >= 0.9 * drawn, f"{what}: {got.usable} of {drawn} usable"
        return got.hits, got.usable, binom_min_successes(got.usable, self.level, self.alpha)

    def _need(self, usable: int) -> int:
        return binom_min_successes(usable, self.level, self.alpha)

    def settled(self, got: Tally, left: int) -> bool | None:
        """The verdict of the check on all :attr:`draws` when ``left`` of them are still to
        come, if every way they can fall gives the same one (each is usable and covers, usable
        and misses, or disowned): True (:meth:`holds` passes), False (it fails, what
        :meth:`caught` wants), None (not known yet). Curtailed sampling: a test that stops
        drawing once it is settled has the full check's verdict on every sequence of draws,
        hence its false-failure rate and its power, for fewer releases (a twin that covers
        nothing is settled after about ``draws - need`` of them). (True also needs 90% of all
        draws usable already.)"""
        h, u = got.hits, got.usable
        worst = max(self._need(u + x) for x in range(left + 1))  # x more usable, all misses
        if h >= worst and u >= 0.9 * self.draws:
            return True
        if all(h + x < self._need(u + x) for x in range(left + 1)):  # x more, all covering
            return False
        return None

    def holds(self, got: int | Tally, what: str) -> None:
        hits, n, need = self._of(got, what)
        if isinstance(got, Tally) and got.drawn and got.drawn < self.draws:
            assert self.settled(got, self.draws - got.drawn), f"{what}: stopped unsettled"
        assert hits >= need, f"{what}: {hits} of {n} covered, need {need}"

    def caught(self, got: int | Tally, what: str) -> None:
        hits, n, need = self._of(got, what)
        if isinstance(got, Tally) and got.drawn and got.drawn < self.draws:
            # curtailed: no way the draws left could make it pass (usable share: of the drawn)
            verdict = self.settled(got, self.draws - got.drawn)
            assert verdict is False, f"{what}: stopped after {got.drawn} draws, {verdict}"
            return
        assert hits < need, (
            f"{what}: the broken twin covered {hits} of {n} (a correct interval "
            f"needs {need}): the check can't tell it from a correct one"
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


def with_intervals(engine: Engine, sql: str, epsilon: Fraction = Fraction(1)) -> Any:
    """One answer to ``sql`` as the ``analyst`` analyst with its interval columns
    (``dpsql.show_intervals = on``): a :class:`dpsql.result.Result`."""
    s = SessionContext("analyst", epsilon, show_intervals=True)
    return engine.execute(engine.prepare(sql, "analyst"), s)


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


DISOWNING = ("does NOT cover", "covers the noise only", "far beyond the interval")
"""The words of an accuracy line that says its interval does not hold (issue 16)."""
_GONE = {
    "_low/_high interval columns are NULL": (True, True),
    "its _high interval column is NULL": (False, True),
    "its _low interval column is NULL": (True, False),
}
_SOME = re.compile(r"In ([\d,]+) of [\d,]+ groups? the released values cannot check it")


def disowned_rows(line: str, got: Sequence[tuple[bool, bool]]) -> None:
    """The invariant of a statistic's interval columns (issue 16): ``got`` per row with a value,
    (low is NULL, high is NULL); ``line`` its accuracy line. The ends are NULL exactly where the
    line disowns the interval (:data:`DISOWNING`), and then the line says which (both; or the
    one that no longer holds, the other staying); a line that disowns it in some groups only
    ('In 3 of 12 groups ...') NULLs exactly that many rows."""
    says = any(w in line for w in DISOWNING)
    gone = [g for w, g in _GONE.items() if w in line]
    assert len(gone) == (1 if says else 0), line
    nulled = [g for g in got if g != (False, False)]
    assert all(g == gone[0] for g in nulled) if gone else not nulled, (got, line)
    some = _SOME.search(line) if "in those groups" in line else None
    want = int(some.group(1).replace(",", "")) if some else (len(got) if says else 0)
    assert len(nulled) == want, (got, line)


def line_of(notices: Sequence[str], sql: str) -> str:
    """The accuracy line of statistic ``sql``."""
    (line,) = [n for n in notices if n.startswith(f"{sql}: ")]
    return line


def interval_columns(r: Any, stats: Mapping[str, str]) -> dict[str, list[tuple[bool, bool]]]:
    """:func:`disowned_rows` for each output column -> its statistic's SQL (the notice line's
    prefix) in ``stats``, over a result's ``<col>_low``/``<col>_high`` columns. Returns per
    column, per row: (low is NULL, high is NULL) (a row whose value is NULL: (True, True))."""
    names = [c.name for c in r.columns]
    out: dict[str, list[tuple[bool, bool]]] = {}
    for col, sql in stats.items():
        lo, hi = names.index(f"{col}_low"), names.index(f"{col}_high")
        got = [(row[lo] is None, row[hi] is None) for row in r.rows]
        v = names.index(col)
        valued = [g for g, row in zip(got, r.rows, strict=True) if row[v] is not None]
        # (a quantile's release may add a line of its own: its outside warning, or that some
        # unit lost more rows than its left-out count allows for: the lines read together)
        disowned_rows(" ".join(n for n in r.notices if n.startswith(f"{sql}: ")), valued)
        out[col] = got
    return out


def release_intervals(rel: Any, si: int, sql: str) -> list[tuple[float, float] | None]:
    """:func:`disowned_rows` for statistic ``si`` (its SQL ``sql``) of a release: its intervals
    per row (None: both ends disowned; an infinite end: that end is)."""
    ivs = [row[si] for row in rel.intervals]
    got = [
        (True, True) if iv is None else (not math.isfinite(iv[0]), not math.isfinite(iv[1]))
        for iv, stats in zip(ivs, rel.stats, strict=True)
        if stats[si] is not None
    ]
    disowned_rows(line_of(rel.notes, sql), got)
    return ivs


def kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every interval kept where the accuracy notice disowns it (as before issue 16): the
    broken twin of the NULL interval columns, or the intervals a test of something else reads
    (the noise's own, which the notice still states)."""
    import dataclasses

    from dpsql.execute import noise

    honest = noise.accuracy_notes

    def keep_all(*args: Any, **kwargs: Any) -> Any:
        return dataclasses.replace(honest(*args, **kwargs), disowned={})

    monkeypatch.setattr(noise, "accuracy_notes", keep_all)


def answered_averages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every AVG answered, value and interval, whatever its count or interval: the NULL rules of
    :mod:`dpsql.execute.avg_unclear` off (its clear count, and an interval spanning its whole
    range), and the rule that gives no end where units the releases cannot see could pull it
    anywhere in its range (:func:`dpsql.execute.accuracy_few.avg_open_text`; checked in
    tests/integration/engine/test_auto_upper_end.py), for a test of something else that reads an
    average's value and interval (its interval's coverage given the stated assumption, its
    rounding, a broken twin's width)."""
    from dpsql.execute import accuracy_avg, avg_unclear

    monkeypatch.setattr(accuracy_avg, "open_rows", lambda *a, **k: [])

    monkeypatch.setattr(
        avg_unclear, "unclear", lambda plan, s, counts, confidence: [False for _ in counts]
    )
    monkeypatch.setattr(avg_unclear, "spans", lambda plan, s, iv: False)


def cells(text: str) -> list[str]:
    """The SQL expressions of a table written as lines of ``a | b | c`` cells, in order."""
    return [e.strip() for line in text.strip().splitlines() for e in line.split(" | ")]
