"""A small SQL grammar (hypothesis strategies) over the demo tables, for the fuzz tests.

It generates what an analyst or an attacker might type: aggregates of arithmetic, casts,
functions, CASE, predicates with LIKE/IN/BETWEEN, GROUP BY, HAVING, ORDER BY, LIMIT, derived
tables, CTEs and joins, with hostile literals (huge numbers, zero divisors, bad units, quotes and
backslashes) mixed in.
"""

from __future__ import annotations

from functools import cache

from hypothesis import strategies as st

NUM_COLS = ["amount", "quantity", "id", "user_id", "p.amount", "p.quantity"]
TEXT_COLS = ["category", "email", "region", "p.category"]
DATE_COLS = ["purchased_at", "p.purchased_at"]
NUM_LITS = [
    "0",
    "1",
    "2",
    "-1",
    "3.5",
    "1e300",
    "1e1000",
    "2147483647",
    "-2147483648",
    "9223372036854775807",
    "0.000001",
    "1e-300",
    "(-2147483648)::int4",
    # a constant expression near NUMERIC's limit (10^131069: a data-gated overflow once)
    "("
    + " * ".join(["(1e1000 * 1e1000 * 1e1000 * 1e1000 * 1e1000 * 1e1000 * 1e1000)"] * 18)
    + " * (1e1000 * 1e1000 * 1e1000 * 1e1000 * 1e1000 * 1e69))",
    "'1e131069'",
]
TEXT_LITS = ["'books'", "'a%'", "'%'", "'x\\'", "''", "'it''s'", "'('", "'2025-13-45'", "$$x$$"]
UNITS = ["'month'", "'day'", "'year'", "'week'", "'foo'", "'hour'", "'quarter'"]
FIELDS = ["year", "month", "hour", "epoch", "dow", "foo", "timezone"]
TYPES = [
    "int",
    "smallint",
    "bigint",
    "numeric",
    "numeric(3,1)",
    "numeric(1000,999)",  # bounds of more than 80 digits (a rounded bound once overflowed)
    "float8",
    "real",
    "text",
    "varchar(1)",
    "boolean",
    "date",
    "timestamp",
    "interval",
]


@cache
def num_expr() -> st.SearchStrategy[str]:
    base = st.one_of(st.sampled_from(NUM_COLS), st.sampled_from(NUM_LITS))

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%"]), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"
            ),
            inner.map(lambda x: f"-({x})"),
            inner.map(lambda x: f"abs({x})"),
            st.tuples(inner, st.sampled_from(["0", "2", "-3", "1001"])).map(
                lambda t: f"round({t[0]}, {t[1]})"
            ),
            st.tuples(inner, st.sampled_from(TYPES)).map(lambda t: f"CAST({t[0]} AS {t[1]})"),
            st.tuples(pred_base(), inner, inner).map(
                lambda t: f"CASE WHEN {t[0]} THEN {t[1]} ELSE {t[2]} END"
            ),
            st.tuples(inner, inner).map(lambda t: f"COALESCE({t[0]}, {t[1]})"),
            st.tuples(inner, inner).map(lambda t: f"NULLIF({t[0]}, {t[1]})"),
            st.tuples(inner, inner).map(lambda t: f"div({t[0]}, {t[1]})"),
            st.tuples(inner, inner).map(lambda t: f"power({t[0]}, {t[1]})"),
            inner.map(lambda x: f"sqrt({x})"),
            st.tuples(st.sampled_from(FIELDS), st.sampled_from(DATE_COLS)).map(
                lambda t: f"extract({t[0]} FROM {t[1]})"
            ),
            text_expr().map(lambda x: f"length({x})"),
        )

    return st.recursive(base, extend, max_leaves=6)


@cache
def text_expr() -> st.SearchStrategy[str]:
    base = st.one_of(st.sampled_from(TEXT_COLS), st.sampled_from(TEXT_LITS))
    return st.one_of(
        base,
        base.map(lambda x: f"lower({x})"),
        base.map(lambda x: f"trim({x})"),
        st.tuples(
            base, st.sampled_from(["1", "-1", "0"]), st.sampled_from(["2", "-1", "quantity"])
        ).map(lambda t: f"substring({t[0]}, {t[1]}, {t[2]})"),
        st.tuples(base, base).map(lambda t: f"{t[0]} || {t[1]}"),
        st.tuples(base, base).map(lambda t: f"concat({t[0]}, {t[1]})"),
        st.tuples(st.sampled_from(NUM_COLS), st.sampled_from(["int", "text"])).map(
            lambda t: f"CAST({t[0]} AS {t[1]})::text"
        ),
    )


@cache
def date_expr() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(DATE_COLS),
        st.tuples(st.sampled_from(UNITS), st.sampled_from(DATE_COLS)).map(
            lambda t: f"date_trunc({t[0]}, {t[1]})"
        ),
        st.sampled_from(["DATE '2025-06-01'", "'2025-06-01'", "now()", "purchased_at + 1"]),
    )


@cache
def pred_base() -> st.SearchStrategy[str]:
    cmp = st.sampled_from(["=", "<>", "<", ">=", "IS DISTINCT FROM"])
    return st.one_of(
        st.tuples(st.sampled_from(NUM_COLS), cmp, st.sampled_from(NUM_LITS)).map(" ".join),
        st.tuples(st.sampled_from(TEXT_COLS), st.sampled_from(TEXT_LITS)).map(
            lambda t: f"{t[0]} LIKE {t[1]}"
        ),
        st.tuples(st.sampled_from(TEXT_COLS), st.sampled_from(TEXT_LITS)).map(
            lambda t: f"{t[0]} = {t[1]}"
        ),
        st.tuples(
            st.sampled_from(DATE_COLS), st.sampled_from(["'2025-06-01'", "DATE '2025-01-01'"])
        ).map(lambda t: f"{t[0]} > {t[1]}"),
        st.sampled_from(NUM_COLS).map(lambda c: f"{c} IS NULL"),
        st.sampled_from(
            [
                "category IN ('books', 'travel')",
                "quantity BETWEEN 2 AND 4",
                "region IN (SELECT code FROM regions)",
                "random() < 0.5",
                "pg_sleep(0) IS NULL",
                "category ~ 'b'",
            ]
        ),
    )


@cache
def predicate() -> st.SearchStrategy[str]:
    base = st.one_of(
        pred_base(),
        st.tuples(num_expr(), st.sampled_from(["<", ">", "="]), num_expr()).map(" ".join),
        st.tuples(text_expr(), st.sampled_from(TEXT_LITS)).map(lambda t: f"{t[0]} LIKE {t[1]}"),
        st.tuples(date_expr(), st.sampled_from(["'2025-06-01'", "DATE '2025-01-01'"])).map(
            lambda t: f"{t[0]} >= {t[1]}"
        ),
    )
    return st.recursive(
        base,
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"
            ),
            inner.map(lambda x: f"NOT ({x})"),
        ),
        max_leaves=3,
    )


@cache
def aggregate() -> st.SearchStrategy[str]:
    return st.one_of(
        st.just("COUNT(*)"),
        num_expr().map(lambda x: f"COUNT({x})"),
        st.sampled_from(
            [
                "COUNT(DISTINCT user_id)",
                "COUNT(DISTINCT category)",
                "COUNT(DISTINCT email)",
                "MIN(amount)",
                "array_agg(email)",
                "percentile_cont(0.5) WITHIN GROUP (ORDER BY amount)",
            ]
        ),
        st.tuples(st.sampled_from(["SUM", "AVG", "STDDEV", "VAR_POP"]), num_expr()).map(
            lambda t: f"{t[0]}({t[1]})"
        ),
    )


GROUPS = [
    "category",
    "region",
    "purchased_at",
    "date_trunc('month', purchased_at)",
    "extract(year FROM purchased_at)",
    "quantity",
    "email",
    "amount",
    "r.name",
]


@st.composite
def query(draw: st.DrawFn) -> str:
    aggs = draw(st.lists(aggregate(), min_size=1, max_size=3))
    group = draw(st.none() | st.sampled_from(GROUPS))
    select = ([group] if group else []) + [f"{a} AS m{i}" for i, a in enumerate(aggs)]
    source = draw(
        st.sampled_from(
            [
                "purchases p",
                "purchases p JOIN regions r ON p.region = r.code",
                "(SELECT * FROM purchases) p",
                "(SELECT amount, quantity, category, region, purchased_at, id, user_id, email "
                "FROM purchases WHERE quantity > 1) p",
                "purchases p, pums u",
            ]
        )
    )
    sql = f"SELECT {', '.join(select)} FROM {source}"
    if "r.name" in sql and "regions" not in source:
        sql = sql.replace("r.name", "region")
    if draw(st.booleans()):
        sql += f" WHERE {draw(predicate())}"
    if group:
        sets = ["1", "1", "1", "ROLLUP (1)", "CUBE (1)", "GROUPING SETS ((1), ())"]
        sql += f" GROUP BY {draw(st.sampled_from(sets))}"
        if draw(st.booleans()):
            sql += " HAVING COUNT(*) > 10"
    if draw(st.booleans()):
        sql += " ORDER BY m0 DESC"
    if draw(st.booleans()):
        sql += f" LIMIT {draw(st.sampled_from(['5', '0', '1000']))}"
    if draw(st.integers(0, 4)) == 0:
        sql = f'SELECT * FROM ({sql}) AS "t" LIMIT 100'
    return sql
