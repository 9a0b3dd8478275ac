"""The rows a unit keeps per group when they are ordered by a hash of their values
(:func:`dpsql.sql.rewrite.keyed_hash.typed_row_order`: COUNT(DISTINCT x), a COUNT of declared
keys, a mode, over values of ``ROW_ORDER_TYPES``), checked on the SQL the engine writes, run on
PostgreSQL with a fixed salt. Deterministic: no noise is read.

1. The order is total on what the measures read: rows of one (unit, group) tied on the whole
   ORDER BY are the same bytes, 'a' and 'A' of a case-insensitive (nondeterministic) collation
   included. Its broken twin, the same SQL with the values ordered without ``COLLATE "C"``,
   has ties of different bytes, which the check finds.
2. The rows kept are a function of the unit's own rows and the salt: the same for every unit
   whose rows are the same in two databases that hold them in another physical order and hold
   other units' rows that differ; at most R rows per (unit, group), G groups per unit.
3. The salt is the statement's only secret: EXPLAIN VERBOSE prints it as '<salt>'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest
import sqlglot
from sqlglot import exp

from dpsql.engine import Engine
from dpsql.execute.private_sql import SALT_MARKER
from dpsql.session import SessionContext
from tests.helpers import EXACT, case_insensitive_collation
from tests.policies import PolicyMaker, private_table

R, G = 2, 2
SQL = "SELECT g, COUNT(DISTINCT v) FROM t GROUP BY g"
UNIT0 = [("x", "a"), ("x", "A"), ("x", "b"), ("x", "B"), ("x", "c"), ("y", "a"), ("z", "Z")]
OTHERS = [(u, f"g{u % 4}", f"v{(u * 7 + k) % 5}") for u in range(1, 40) for k in range(u % 6)]


def _load(dsn: str, rows: list[tuple[int, str, str]]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        case_insensitive_collation(conn)
        conn.execute("CREATE TABLE t (pid integer NOT NULL, g text, v text COLLATE ci)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", rows)


@pytest.fixture(scope="module")
def dbs(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[tuple[Engine, str, str]]:
    """(an engine on the first database, its DSN, a neighbour's DSN): the same rows of unit 0
    inserted last and in reverse order, unit 1 gone, unit 2 with more rows."""
    pf = make_policy(
        "typedorder",
        base={"version": 1},
        tables={
            "public.t": private_table(
                "pid", {"g": {"type": "text"}, "v": {"type": "text"}}, rows=R, groups=G
            )
        },
        analysts={"a": {"budget": {"epsilon": 1000, "delta": 0.1}}},
    )
    first, second = make_db("typedorder"), make_db("typedorder")
    _load(first, [(0, g, v) for g, v in UNIT0] + OTHERS)
    extra = [(2, f"g{k}", f"w{k}") for k in range(6)]
    _load(second, [r for r in OTHERS if r[0] != 1] + extra + [(0, g, v) for g, v in UNIT0[::-1]])
    engine = Engine(pf.policy, first, pool_size=2, noise=EXACT)
    yield engine, first, second
    engine.close()


def _bounded(engine: Engine) -> exp.Select:
    """The statement's bounded SQL as the engine writes it, with a fixed salt."""
    p = engine.prepare(SQL)
    assert p.analysis is not None
    text = engine.private_sql(p, p.analysis).replace(SALT_MARKER, "0123456789abcdef")
    assert 'COLLATE "C"' in text and "_dp_rt" not in text  # the typed row order
    tree = sqlglot.parse_one(text, read="postgres")
    assert isinstance(tree, exp.Select)
    return tree


def _ctes(tree: exp.Select, body: exp.Select) -> str:
    out = body.copy()
    out.set("with_", tree.args["with_"].copy())
    return out.sql("postgres")


def _ties(tree: exp.Select, twin: bool = False) -> str:
    """(unit, group, order key) classes of the ranked rows holding values of different bytes."""
    bounded = next(c for c in tree.args["with_"].expressions if c.alias == "_dp_bounded")
    window = next(w for w in bounded.find_all(exp.Window) if isinstance(w.this, exp.RowNumber))
    order = [o.this.copy() for o in window.args["order"].expressions]
    if twin:  # the values ordered in their own collation
        order = [o.this if isinstance(o, exp.Collate) else o for o in order]
    keys = [p.copy() for p in window.args["partition_by"]] + order
    utf8 = "COUNT(DISTINCT convert_to(_dp_v0, 'UTF8')) > 1"
    body = exp.select(*keys).from_("_dp_bounded").group_by(*keys).having(utf8)
    return _ctes(tree, body)


def _kept(dsn: str, tree: exp.Select) -> dict[int, list[tuple[str, bytes]]]:
    body = exp.select("_dp_unit", "_dp_g0", "convert_to(_dp_v0, 'UTF8')", "_dp_rn", "_dp_gr").from_(
        "_dp_bounded"
    )
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(_ctes(tree, body)).fetchall()
    out: dict[int, list[tuple[str, bytes]]] = {}
    for unit, g, v, rn, gr in rows:
        if rn <= R and gr <= G:
            out.setdefault(unit, []).append((g, bytes(v)))
    return {u: sorted(rs) for u, rs in out.items()}


def test_rows_tied_on_the_order_are_the_same_bytes(dbs: tuple[Engine, str, str]) -> None:
    engine, first, _ = dbs
    tree = _bounded(engine)
    with psycopg.connect(first) as conn:
        assert conn.execute(_ties(tree)).fetchall() == []
        # the broken twin: 'a' and 'A' of unit 0 tie (case-insensitive hash and order)
        twin = conn.execute(_ties(tree, twin=True)).fetchall()
    assert twin and all(r[0] == 0 for r in twin), twin


def test_kept_rows_are_a_function_of_the_units_own_rows(dbs: tuple[Engine, str, str]) -> None:
    engine, first, second = dbs
    tree = _bounded(engine)
    a, b = _kept(first, tree), _kept(second, tree)
    same = {u for u in range(40) if u not in (1, 2)}
    assert {u: a[u] for u in same if u in a} == {u: b[u] for u in same if u in b}
    assert 0 in a and 1 not in b and a[2] != b[2]
    for kept in (a, b):
        for rows in kept.values():
            groups = [g for g, _ in rows]
            assert len(set(groups)) <= G and all(groups.count(g) <= R for g in groups)
    # unit 0 keeps 2 rows of its 5 in x (R), never both 'a' and 'A' by chance of the scan
    assert len(a[0]) <= R * G


def test_explain_verbose_shows_the_salt_as_a_placeholder(dbs: tuple[Engine, str, str]) -> None:
    engine, _, _ = dbs
    got = engine.execute(engine.prepare("EXPLAIN VERBOSE " + SQL), SessionContext(analyst="a"))
    text = "\n".join(str(r[0]) for r in got.rows)
    assert "HASHTEXTEXTENDED('<salt>', 0)" in text and 'COLLATE "C"' in text
    assert SALT_MARKER not in text and "dpsql_salt_" not in text
