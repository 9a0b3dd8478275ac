import random
import time
from pathlib import Path

import psycopg
import psycopg_pool

from dpsql.execute.embedded import _remove_later


def test_cluster_answers(make_db):
    dsn = make_db("smoke")
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select 1 + 1").fetchone() == (2,)


def test_pools_leave_the_global_random_alone(pg_admin_dsn: str) -> None:
    """A pool's worker threads connecting leave the global random state as it was (conftest.py
    gives psycopg_pool a generator of its own): else a pool growing while a @given test draws an
    example reads, to Hypothesis, as the strategy using `random`. Without conftest.py's line
    this fails (each connection's expiry jitter is one global draw)."""
    state = random.getstate()
    with psycopg_pool.ConnectionPool(pg_admin_dsn, min_size=3, max_size=3) as pool:
        pool.wait()
    assert random.getstate() == state


def test_remove_later_takes_the_password_file_and_name_at_once(tmp_path: Path) -> None:
    """A test session's cluster directory (Cluster.stop(remove_later=True)): its password file
    and its ``dpsql-pg-*`` name are gone when the call returns; a detached ``rm`` removes the
    rest (awaited here, with a deadline)."""
    root = tmp_path / "dpsql-pg-x"
    (root / "data" / "base").mkdir(parents=True)
    (root / "dpsql_superuser_password").write_text("secret")
    for i in range(50):
        (root / "data" / "base" / str(i)).write_bytes(b"x" * 8192)
    _remove_later(root)
    assert not root.exists()
    assert not list(tmp_path.glob("*/dpsql_superuser_password"))
    deadline = time.monotonic() + 60
    while list(tmp_path.iterdir()):
        assert time.monotonic() < deadline, list(tmp_path.iterdir())
        time.sleep(0.05)
