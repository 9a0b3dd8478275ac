"""A 1M-row private table for the release tests, generated in PostgreSQL with a fixed seed.

``people``: 1,000,000 rows of about 200,000 units (pid), plus 5 heavy units of 2,000 rows each.
Columns are correlated (educ with age, income with educ, employed with age) so that 2-way
marginals carry information an independent-marginals baseline misses.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from dpsql.policy.model import Policy
from tests.policies import build_policy, policy_doc

ROWS = 1_000_000

SCHEMA = """
SELECT setseed(0.17);
CREATE TABLE regions (code text PRIMARY KEY);
INSERT INTO regions VALUES ('C'), ('E'), ('N'), ('S'), ('W');
CREATE UNLOGGED TABLE people AS
WITH base AS (
  SELECT g, floor(random() * 200000)::int AS pid, 18 + floor(random() * 70)::int AS age,
         random() AS r1, random() AS r2, random() AS r3, random() AS r4, random() AS r5
  FROM generate_series(1, 1000000) g
), ed AS (
  SELECT *, LEAST(16, GREATEST(1, age / 6 + floor(r2 * 6)::int)) AS educ FROM base
)
SELECT g AS id, pid, age,
       CASE WHEN r1 < 0.5 THEN 'F' ELSE 'M' END AS sex,
       educ,
       round((educ * 8000 + r3 * 30000)::numeric, 2) AS income,
       (ARRAY['C','E','N','S','W'])[1 + floor(r4 * 5)::int] AS region,
       r5 < CASE WHEN age < 65 THEN 0.85 ELSE 0.15 END AS employed,
       'n' || g AS note
FROM ed;
INSERT INTO people
SELECT 1000000 + w * 2000 + i, -w, 20 + (i % 60), 'F', 1 + (i % 16), 150000 + i, 'N', true, 'h'
FROM generate_series(1, 5) w, generate_series(1, 2000) i;
ANALYZE people;
"""

PEOPLE = {  # two identifiers: id, then the unit pid
    "id": {"type": "bigint", "identifier": True},
    "pid": {"type": "integer", "identifier": True},
    "age": {"type": "integer", "bounds": [0, 99]},
    "sex": {"type": "text", "keys": ["F", "M"]},
    "educ": {"type": "integer", "keys": list(range(1, 17))},
    "income": {"type": "numeric", "bounds": [0, 200000]},
    "region": {"type": "text", "keys_from": "public.regions.code"},
    "employed": {"type": "boolean"},
    "note": {"type": "text"},
}
# the release tests' policy document: make_policy("release", base=POLICY_DOC), or policy()
POLICY_DOC = policy_doc(
    base={"dataset": "release_test"},
    budget={"epsilon": 1000, "delta": 1.0e-2},
    tables={
        "public.people": {
            "privacy_unit": "pid",
            "max_rows_per_unit": 2,
            "max_groups_per_unit": 3,
            "columns": PEOPLE,
        }
    },
    public_tables=["public.regions"],
    analysts={
        "owner": {"budget": {"epsilon": 500, "delta": 1.0e-3}, "max_epsilon": 20},
        "poor": {"budget": {"epsilon": 0.5}},
    },
)

_CREATED: dict[str, str] = {}


def people_dsn(make_db: Callable[[str], str]) -> str:
    """The database holding ``people`` (created once per test session)."""
    key = "people"
    if key not in _CREATED:
        dsn = make_db("release")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SCHEMA)
        _CREATED[key] = dsn
    return _CREATED[key]


def policy() -> Policy:
    return build_policy(base=POLICY_DOC)
