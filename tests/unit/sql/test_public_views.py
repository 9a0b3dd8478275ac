"""Which view definitions (``pg_get_viewdef``'s text) can fail on their own rows
(dpsql.sql.public_views): a private statement reading such a public view is refused, since
PostgreSQL runs the view only where a private row reaches it (tests/redteam/test_public_views.py)."""

from __future__ import annotations

import pytest

from dpsql.sql.public_views import fallible_reason, view_failure

CANT_FAIL = [
    "SELECT r.code FROM regions_raw r WHERE ((r.name)::text = 'N'::text) AND (r.d < now()) "
    "AND (r.n = ANY (ARRAY[1, 2])) AND (r.n > '-1'::integer) AND (r.n IS NOT NULL)",
    "SELECT d.dd, count(*) AS n FROM d GROUP BY d.dd HAVING (count(*) > 1) UNION SELECT x.dd, 0 "
    "FROM (SELECT d.dd, d.k FROM d) x WHERE (EXISTS (SELECT 1 FROM e WHERE (e.k = x.k))) "
    "AND (x.k IN (SELECT e.k FROM e)) ORDER BY 1 LIMIT 10",
    "SELECT r.a, CASE WHEN (r.a > 1) THEN 'big'::text ELSE COALESCE(r.b, 'x'::text) END AS c "
    "FROM r LEFT JOIN s ON ((s.a = r.a))",
    "SELECT r.a FROM r WHERE ((r.a >= '-5'::integer) AND (r.a <= (- 5)))",
    "SELECT DISTINCT ON (r.a) r.a, r.b FROM r ORDER BY r.a, r.b DESC",
    "WITH w AS (SELECT r.a FROM r) SELECT w.a, min(w.a) AS lo FROM w GROUP BY w.a",
    "SELECT r.a FROM r WHERE ((r.a IS DISTINCT FROM 3) AND ((r.b >= 1) AND (r.b <= 3)) AND (NOT r.c))",
]
MAY_FAIL = {
    "SELECT r.code, ((100)::numeric / (r.n - (2)::numeric)) AS k FROM r": "a division",
    "SELECT r.code FROM r WHERE ((r.n * 2) > 1)": "arithmetic (*)",
    "SELECT lower(r.name) AS n FROM r": "function lower()",
    "SELECT pg_catalog.upper(r.name) AS n FROM r": "function pg_catalog.upper()",
    "SELECT r.a FROM r WHERE ((r.name)::text ~~ 'a%'::text)": "a pattern match (LIKE)",
    "SELECT ( SELECT max(x.a) AS max FROM x) AS m FROM r": "a scalar subquery",
    "SELECT (count(*))::integer AS n FROM r": "a cast of a column",
    "SELECT (r.n)::double precision AS f FROM r": "a cast of a column",
    "SELECT (- r.a) AS n FROM r": "a negation",
    "SELECT r.a FROM generate_series(1, 3) r(a)": "function generate_series()",
    "SELECT sum(r.a) AS s FROM r": "function sum()",
    "SELECT row_number() OVER (ORDER BY r.a) AS n FROM r": "a window function",
    "SELECT r.a FROM r WHERE": "a definition dpsql can't read",
}


@pytest.mark.parametrize("definition", CANT_FAIL)
def test_columns_constants_and_comparisons_cant_fail(definition: str) -> None:
    assert view_failure(definition) is None


@pytest.mark.parametrize(("definition", "words"), MAY_FAIL.items())
def test_what_can_fail_is_named(definition: str, words: str) -> None:
    assert view_failure(definition) == words


def test_a_foreign_table_runs_its_servers_query() -> None:
    assert "a foreign table" in str(fallible_reason("public.f", "fpublic.f\n"))
    assert fallible_reason("public.v", "vpublic.v\nSELECT r.a FROM r") is None
    got = fallible_reason("public.v", "vpublic.v\nSELECT (r.a / 2) AS h FROM r")
    assert got == "it is a view that computes a division"
    got = fallible_reason("public.w", "vpublic.v\nSELECT (r.a / 2) AS h FROM r")
    assert got == "it reads public.v, a view that computes a division"
