"""The demo dataset: PUMS (public census extract) and a generated purchases table.

``purchases`` has about 120,000 rows from 12,000 users, plus five "whales" with 400 purchases of
$250,000+ each: the rich newcomers whose presence contribution bounding and clamping hide.
Generated in PostgreSQL with a fixed seed, so every machine gets the same data.

``dpsql demo`` answers :data:`EXAMPLES` as the policy's :data:`EXAMPLES_ANALYST`, an analyst of its
own with no credential (it cannot log in): the examples spend its budget, never the budget of the
analyst who then connects to ``dpsql demo --serve``, and never show up in their ``dpsql.history``.
(Like every release, they also count against the dataset's budget, the sum over all analysts.)
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import psycopg

POLICY = Path(str(resources.files("dpsql.demo") / "policy.yaml"))

EXAMPLES_ANALYST = "examples"
"""Who the example queries are charged to (``analysts.examples`` in the demo policy)."""

EXAMPLES = [
    "SELECT COUNT(*) AS purchases, AVG(amount) AS avg_amount FROM purchases",
    "SELECT category, COUNT(*) AS n, SUM(amount) AS revenue FROM purchases "
    "GROUP BY category ORDER BY revenue DESC",
    "SELECT region, COUNT(DISTINCT user_id) AS customers FROM purchases "
    "WHERE purchased_at >= DATE '2025-07-01' GROUP BY region",
    "SELECT sex, COUNT(DISTINCT pid) AS people FROM pums GROUP BY sex",
    "SELECT * FROM purchases",
]
"""Four noisy aggregates and one refused raw-row query (42501).

The census example counts people (``pid``), each of whom has 1-4 rows: about 500 a group, ±6 at
epsilon 1. It was ``AVG(income)`` and ``STDDEV(age)`` by sex, which on 1,000 people at epsilon 1
answered, e.g., 16,000 [0, 500,000] against a truth of 46,787: too few people to choose the
bounds (the fixed defaults keep one row a person and a group, leaving out about 900 of the 1,948
rows), and the estimate of what that left out, at a tenth of epsilon, is as wide as the declared
range. Honest, but it read as broken on the first screen (README, "Quick start")."""

SCHEMA = """
DROP TABLE IF EXISTS purchases, pums, regions;
CREATE TABLE regions (code text PRIMARY KEY, name text NOT NULL);
INSERT INTO regions VALUES ('N','North'),('S','South'),('E','East'),('W','West'),('C','Central');
CREATE TABLE pums (age integer, sex integer, educ integer, race integer, income numeric,
                   married integer, pid integer NOT NULL);
CREATE TABLE purchases (
  id bigserial PRIMARY KEY, user_id integer NOT NULL, email text, category text NOT NULL,
  region text NOT NULL REFERENCES regions(code), amount numeric(12,2), quantity integer,
  purchased_at date);
"""

PURCHASES = """
SELECT setseed(0.42);
INSERT INTO purchases (user_id, email, category, region, amount, quantity, purchased_at)
SELECT u, 'user' || u || '@example.com',
       (ARRAY['groceries','electronics','clothing','books','travel'])[1 + floor(random() * 5)::int],
       (ARRAY['N','S','E','W','C'])[1 + floor(random() * 5)::int],
       round((random() * random() * 300)::numeric, 2),
       1 + floor(random() * 5)::int,
       DATE '2025-01-01' + floor(random() * 365)::int
FROM (SELECT g, 1 + floor(random() * 12000)::int AS u FROM generate_series(1, 120000) g) s;
INSERT INTO purchases (user_id, email, category, region, amount, quantity, purchased_at)
SELECT 100000 + w, 'whale' || w || '@example.com', 'travel', 'C',
       round((250000 + random() * 1000000)::numeric, 2), 1 + floor(random() * 10)::int,
       DATE '2025-06-01' + (i % 30)
FROM generate_series(1, 5) w, generate_series(1, 400) i;
ANALYZE purchases;
"""


CITUS = """
ALTER TABLE purchases DROP CONSTRAINT purchases_pkey;
ALTER TABLE purchases ADD PRIMARY KEY (user_id, id);
SELECT create_reference_table('regions');
SELECT create_distributed_table('purchases', 'user_id');
SELECT create_distributed_table('pums', 'pid', colocate_with => 'purchases');
"""
"""On a Citus coordinator: private tables distributed by their privacy unit and co-located (a
unit's rows of both on one worker), the public table replicated to every worker. Citus wants the
distribution column in every unique constraint, hence purchases' key (user_id, id)."""


def is_citus(conn: psycopg.Connection[tuple[object, ...]]) -> bool:
    """Whether the database at ``conn`` has the Citus extension (a coordinator)."""
    return conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'").fetchone() is not None


def load_demo(dsn: str) -> bool:
    """(Re)create the demo tables in the database at ``dsn`` (any PostgreSQL; on a Citus
    coordinator, distributed: :data:`CITUS`). True when they were distributed."""
    csv = resources.files("dpsql.demo") / "pums.csv"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        citus = is_citus(conn)
        if citus:
            conn.execute(CITUS)
        with (
            conn.cursor() as cur,
            cur.copy(
                "COPY pums (age, sex, educ, race, income, married, pid) FROM STDIN WITH (FORMAT csv, HEADER true)"
            ) as cp,
        ):
            cp.write(csv.read_bytes())
        conn.execute(PURCHASES)
    return citus
