import random

import psycopg
import psycopg_pool


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
