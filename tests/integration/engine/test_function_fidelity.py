"""Every function call runs as the user wrote it, or is refused: a differential test against
PostgreSQL itself (dpsql/sql/arities.py).

sqlglot reads the calls it knows into nodes of its own and writes them back its own way: it
dropped surplus arguments (``round(a, 1, 2)`` ran as ``ROUND(a, 1)``, ``log10()`` as
``LOG(10)`` = 1), filled in missing ones (``string_agg(s)``), mapped other databases' names
(``ifnull``, ``min(a, b)`` as ``LEAST``) and accepted what PostgreSQL's grammar refuses
(``position(a, b)``, ``current_user()``, ``percentile_cont(x, 0.5)``). For every function whose
name sqlglot knows (PostgreSQL's own catalog, each signature with constants of its types, and
0 .. most+1 plain arguments), every other database's name sqlglot maps, and the grammar's special
forms, the statement as written runs directly on PostgreSQL and the SQL dpsql would send for it
runs too, in the same transaction. Property: dpsql's SQL gives the same rows, or dpsql refuses
a statement PostgreSQL refuses too; never a result where PostgreSQL has an error, never another
value. Deterministic (no noise: public statements over constants and a small public table).
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
import pytest
import sqlglot
import sqlglot.errors
from sqlglot import exp

import dpsql.sql.parse as parse_module
from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext
from dpsql.sql import arities
from dpsql.sql.arities import ARITY, NOT_POSTGRES
from tests.policies import build_policy

# A constant of each argument type (pg_type.typname).
LITERAL = {
    "int2": "7", "int4": "7", "int8": "7", "numeric": "2.567", "float8": "2.567::float8",
    "float4": "2.5::float4", "text": "'abc'", "varchar": "'abc'", "bpchar": "'abc'",
    "name": "'abc'", "bool": "true", "date": "DATE '2024-03-15'",
    "timestamp": "TIMESTAMP '2024-03-15 10:20:30'",
    "timestamptz": "TIMESTAMPTZ '2024-03-15 10:20:30+00'", "interval": "INTERVAL '1 day'",
    "time": "TIME '10:20:30'", "json": "'[1,2]'::json", "jsonb": "'[1,2]'::jsonb",
    "anyelement": "7", "anycompatible": "7", "anyarray": "ARRAY[1,2]",
    "anycompatiblearray": "ARRAY[1,2]", "_text": "ARRAY['a','b']", "any": "7",
    "anynonarray": "7", "anycompatiblenonarray": "7", "bytea": "'\\x0102'::bytea",
    "_int4": "ARRAY[1,2]", "unknown": "'abc'", "oid": "7",
}  # fmt: skip
PLAIN = ["7", "2", "3", "4", "5", "6", "8", "9"]
# Functions the catalog layer answers from its own views (dpsql/catalog): not a translation.
CATALOG = {
    "col_description", "format_type", "has_column_privilege", "has_database_privilege",
    "has_schema_privilege", "has_table_privilege", "obj_description", "pg_get_userbyid",
    "pg_table_is_visible", "pg_type_is_visible", "shobj_description", "pg_backend_pid",
    "current_database", "version", "current_schemas",
}  # fmt: skip
# Differ on every call (volatile, or the statement's own start time).
VOLATILE = {"random", "clock_timestamp", "timeofday", "gen_random_uuid", "statement_timestamp"}
# Calls dpsql refuses though PostgreSQL runs them (sqlglot cannot parse them, or sends them
# in a form PostgreSQL 15 does not run): refused or an upstream error, never another value.
# json_object: its one-argument form (0A000; the two-argument form runs as written). like: its
# function form (0A000; sqlglot reads like(s, p) as SQLite's like(pattern, string) and sent p LIKE
# s, another value whenever the two differ: this sweep's like('abc', 'abc') could not see it).
NOT_RUN = {"overlaps", "convert", "json_object", "like"}

# The grammar's special forms and the renames to check (over the table pt, see _database).
FORMS = """
log(f) | log(n) | log(2, n) | log(10, 1000) | log10(n) | ln(n) | exp(n) | trunc(n) | trunc(n, 1)
trunc(f) | div(i, 2) | div(n, 2) | mod(i, 2) | mod(n, 2) | i % 2 | power(i, 2) | power(n, 2)
pow(n, 2) | power(f, 0.5) | n ^ 2 | sqrt(n) | cbrt(f) | concat(s, NULL, i) | concat_ws('-', s, i)
s || NULL | s || i | greatest(i, NULL, 2) | least(i, NULL, 2) | greatest(i, n) | left(s, -1)
right(s, -1) | left(s, 2) | right(s, 2) | split_part(s, ',', 2) | split_part(s, ',', -1)
date_part('year', d) | date_part('epoch', ts) | date_part('dow', ts) | extract(year FROM d)
extract(epoch FROM ts) | extract(dow FROM ts) | extract(isodow FROM ts) | extract(week FROM ts)
extract(quarter FROM ts) | to_char(ts, 'YYYY-MM-DD HH24:MI:SS') | to_char(d, 'Mon DD YYYY')
to_char(ts, 'IYYY-IW') | to_char(n, '999D99') | to_char(i, '000') | to_char(ts, 'FMMonth')
to_date('2024-03-15', 'YYYY-MM-DD') | to_timestamp('2024-03-15 10:20', 'YYYY-MM-DD HH24:MI')
to_timestamp(1700000000) | to_timestamp(f) | to_number('1,234.5', '9,999.9')
regexp_replace(s, 'b', 'X') | regexp_replace(s, 'B', 'X', 'i') | regexp_replace(s, '[a-c]', 'X', 'g')
regexp_match(s, '(b)') | regexp_like(s, 'B', 'i') | regexp_like(s, 'b') | regexp_like(s, 'B', 'c')
regexp_like(s, 'b', 'x') | regexp_like(s, 'b', 'ig') | regexp_count(s, 'b') | regexp_substr(s, 'b')
regexp_instr(s, 'b') | s ~ 'b' | s ~* 'B' | s !~ 'b' | s SIMILAR TO 'a%' | substr(s, -1)
substr(s, -1, 3) | substr(s, 0, 2) | substring(s, -1, 3) | substring(s from 2)
substring(s from 2 for 1) | substring(s for 2) | substring(s from 'b.') | round(f) | round(n)
round(n, 1) | round(f, 1) | round(i, -1) | round(n, -1) | round(n, 1, 2) | ceil(n) | ceiling(n)
floor(f) | sign(n) | abs(n) | length(s) | char_length(s) | character_length(s) | bit_length(s)
lower(s) | upper(s) | initcap(s) | btrim(s, 'a') | ltrim(s, 'a') | rtrim(s, 'c') | trim(s)
trim(both 'a' from s) | trim(leading 'a' from s) | trim(trailing 'c' from s) | trim(from s)
trim('a' from s) | trim(both from s) | trim(s, 'a') | trim(s, 'a', 'b') | lpad(s, 5, '*')
rpad(s, 5) | lpad(s, 2) | repeat(s, 2) | reverse(s) | replace(s, 'b', 'X') | strpos(s, 'b')
position('b' in s) | position('b', s) | overlay(s placing 'X' from 2)
overlay(s placing 'X' from 2 for 0) | overlay(s, 'X', 2) | translate(s, 'ab', 'xy') | md5(s)
ascii(s) | chr(65) | char(65) | starts_with(s, 'a') | coalesce(s, 'z') | nullif(i, 7)
date_trunc('month', ts) | date_trunc('week', d) | date_trunc('quarter', ts)
date_trunc('day', ts, 'UTC') | d + 1 | d - 1 | d - DATE '2024-01-01' | ts + INTERVAL '1 month'
age(ts, TIMESTAMP '2020-01-01') | make_date(2024, 2, 29) | make_interval(days => 3)
make_timestamp(2024, 1, 2, 3, 4, 5.5) | justify_days(INTERVAL '35 days') | interval(7)
ts AT TIME ZONE 'UTC' | ts AT TIME ZONE 'America/New_York' | s COLLATE "C"
i IS DISTINCT FROM NULL | i IS NOT DISTINCT FROM NULL | n::numeric(10, 1) | n::numeric(3)
f::numeric(10, 2) | CAST(n AS numeric(4, 2)) | s::varchar(2) | s::char(2) | n::int | f::int
f::bigint | '1.5'::float::int | d::timestamp | ts::date | CAST(ts AS time) | ts::time(0)
TIMESTAMP(0) '2024-03-15 10:20:30.6' | width_bucket(n, 0, 10, 5) | gcd(i, 4) | factorial(5)
pi() | radians(180) | atan2(1, 2) | cot(1) | array_length(a, 1) | array_length(a)
cardinality(a) | array_to_string(a, ',') | array_to_string(a, ',', '*') | string_to_array(s, ',')
array_upper(a, 1) | jsonb_build_object('k', i) | to_jsonb(s) | j -> 'a' | j ->> 'a' | j #> '{a}'
format('%s-%s', s, i) | quote_ident(s) | pg_typeof(n) | to_hex(i) | to_hex(i, 2)
CASE WHEN i > 0 THEN 'p' ELSE 'n' END | i BETWEEN 1 AND 8 | i BETWEEN SYMMETRIC 8 AND 1
s LIKE 'a%' | s ILIKE 'A%' | i IN (1, 7) | i = ANY(ARRAY[1, 7]) | (i, s) = (7, 'abc')
now() | now(1) | current_timestamp(1) | CAST(current_timestamp AS timestamptz(1)) | current_user() | user() | current_schema()
ifnull(s, 'z') | nvl(s, 'z') | iif(i > 0, 1, 2) | len(s) | log2(8) | instr(s, 'b') | hex(i)
min(i) | min(i, 2) | max(i, n) | count(i) | count(i, 2) | sum(i, 2) | avg(n, 2)
string_agg(s, ',') | string_agg(s) | string_agg(s, ',' ORDER BY i, n) | array_agg(i ORDER BY n, i)
array_agg(i, n) | percentile_cont(0.5) WITHIN GROUP (ORDER BY n) | percentile_cont(n, 0.5)
percentile_disc(0.5) WITHIN GROUP (ORDER BY i) | mode() WITHIN GROUP (ORDER BY i) | mode(i)
concat(VARIADIC ARRAY['a', 'b']) | format('%s-%s', VARIADIC ARRAY['a', 'b']) | count(DISTINCT i)
json_extract_path_text('{"a": {"b": 1}}'::json, VARIADIC ARRAY['a', 'b']) | count(DISTINCT i, s)
count(*) FILTER (WHERE i > 0) | sum(n) FILTER (WHERE s IS NOT NULL) | string_agg(DISTINCT s, ',')
array_agg(DISTINCT i) | string_agg(s, ',') FILTER (WHERE i > 0) | max(n ORDER BY i)
string_agg(DISTINCT s) | array_agg(DISTINCT i, n) | sum(DISTINCT i)
round(n, 1, 2 IN (2)) | round(n, 1 IN (1)) | log10(n, 1 IN (1)) | coalesce(s SIMILAR TO 'a%', true)
log10(f) | log10(i) | log10(n)::text | pg_typeof(log10(i)) | date_part('epoch', ts)::text
pg_typeof(date_part('dow', d)) | date_part('DOW', ts)::text | date_part('epoch', ts + INTERVAL '1 day')
date_part('year', CURRENT_DATE) | date_part(s, ts) | date_part('dow', date_part('epoch', ts)::int)
json_object(ARRAY['a', s], ARRAY['1', s]) | json_object(ARRAY['k'], ARRAY[s])::text
"ROUND"(n, 1) | "round"(n, 1) | U&"r\\006Fund"(n, 1, 2) | U&"\\0069fnull"(s, 'z') | string_agg(s
percentile_cont(0.5, i IN (1)) WITHIN GROUP (ORDER BY n) | substr(s FROM 2) | upper(s FOR 2)
position('b', s IN ('x')) | extract(year, d IN (d)) | position('b' IN s, 1)
substr(s, '2') | substr(s, '2', '1') | substr(s, '1', 2) | substr(s, 'b') | SUBSTR(s, '2')
substring(s, '2') | substring(s, 'b', '#') | substr(s, 2, '1') | substr('a2bc', '2')
"""
FORM_REFUSED = {  # PostgreSQL runs these; dpsql's public allowlist does not name them (42501)
    # PostgreSQL's other flags ('x': expanded syntax): sqlglot writes the call as ~ and drops them
    "SELECT regexp_like(s, 'b', 'x') FROM pt",
    # the precision: sqlglot writes CURRENT_TIMESTAMP without it (another value)
    "SELECT current_timestamp(1) FROM pt",
}


def _database(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE pt(i int, n numeric, f float8, s text, d date, ts timestamp, j jsonb,"
            " a int[])"
        )
        conn.execute(
            "INSERT INTO pt VALUES (7, 2.567, 2.567, 'abc', '2024-03-15', '2024-03-15 10:20:30',"
            " '{\"a\": 1}', ARRAY[1, 2]), (-3, -1.5, -1.5, NULL, NULL, NULL, NULL, NULL),"
            " (NULL, 0, 0, 'a,b,c', '2023-12-31', '2023-12-31 23:59:59', '[1]', '{}')"
        )


@dataclass(frozen=True)
class Outcome:
    kind: str  # "ok" (rows), "err" (PostgreSQL's SQLSTATE), "refused" (dpsql's SQLSTATE)
    value: str


@dataclass(frozen=True)
class Runner:
    conn: psycopg.Connection[tuple[object, ...]]
    engine: Engine
    session: SessionContext

    def run(self, sql: str) -> Outcome:
        try:
            with self.conn.transaction():
                return Outcome("ok", _rows(self.conn.execute(sql).fetchall()))
        except psycopg.Error as e:
            return Outcome("err", str(e.sqlstate))

    def both(self, sql: str) -> tuple[Outcome, Outcome, str | None]:
        """(as written on PostgreSQL, dpsql's SQL on PostgreSQL or its refusal, that SQL)."""
        try:
            prepared = self.engine.prepare_in_scope(sql, self.engine.scope(None))
            text = self.engine.runnable_sql(prepared, self.session)
        except DpsqlError as e:
            with self.conn.transaction():
                return self.run(sql), Outcome("refused", e.sqlstate), None
        with self.conn.transaction():  # one transaction: now() is the same instant
            return self.run(sql), self.run(text), text


def _rows(rows: list[tuple[object, ...]]) -> str:
    """Rows as text, a numeric shown as the double it equals (EXTRACT is numeric where
    date_part is double precision: the same number, which the comparison is about)."""
    return repr([tuple(float(v) if isinstance(v, decimal.Decimal) else v for v in r) for r in rows])


@pytest.fixture(scope="module")
def runner(make_db: Callable[[str], str]) -> Iterator[Runner]:
    dsn = make_db("fidelity")
    _database(dsn)
    policy = build_policy(fixed_bounds=True, add_public_tables=["public.pt"])
    engine = Engine(policy, dsn, pool_size=2)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET statement_timeout = '5s'")
        yield Runner(conn, engine, SessionContext(analyst="analyst"))
    engine.close()


def _signatures(conn: psycopg.Connection[tuple[object, ...]]) -> dict[str, list[tuple[str, ...]]]:
    rows = conn.execute(
        "SELECT p.proname, p.provariadic <> 0, p.pronargdefaults,"
        " array(SELECT t.typname::text FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY a(o, k)"
        "       JOIN pg_type t ON t.oid = a.o ORDER BY a.k)"
        " FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace"
        " AND p.prokind IN ('f', 'a', 'w') AND NOT p.proretset"
    ).fetchall()
    out: dict[str, list[tuple[str, ...]]] = {}
    for name, variadic, defaults, types in rows:
        shapes = out.setdefault(str(name), [])
        if all(t in LITERAL for t in types):
            args = [LITERAL[t] for t in types]
            shapes += [tuple(args[: len(args) - d]) for d in range(int(defaults) + 1)]
            if variadic:
                shapes.append((*args, args[-1]))
    return out


def _calls(name: str, signatures: list[tuple[str, ...]]) -> list[str]:
    most = max([len(s) for s in signatures] + [ARITY.get(name, (0, 3))[1] or 3])
    shapes = set(signatures)
    for k in range(most + 2):
        shapes |= {tuple(PLAIN[:k]), tuple(["'abc'", *PLAIN[: k - 1]])} if k else {()}
    aggregate = name in ("count", "sum", "avg", "min", "max", "array_agg", "string_agg")
    tail = " FROM (VALUES (1)) v(x)" if aggregate else ""
    return [f"SELECT {name}({', '.join(s)}){tail}" for s in sorted(shapes)]


def _differences(runner: Runner, statements: list[str], name_of: Callable[[str], str]) -> list:
    bad = []
    for sql in statements:
        name = name_of(sql)
        written, sent, text = runner.both(sql)
        if sent.kind == "refused":
            if written.kind == "ok" and name not in NOT_RUN and sql not in FORM_REFUSED:
                bad.append(("refused what PostgreSQL runs", sql, written, sent))
            continue
        if written.kind == "err" and sent.kind == "ok":
            bad.append(("ran what PostgreSQL refuses", sql, text, written, sent))
        elif written.kind == "ok" and sent.kind == "err" and name not in NOT_RUN:
            bad.append(("broke", sql, text, written, sent))
        elif written.kind == sent.kind == "ok" and written != sent and name not in VOLATILE:
            bad.append(("another value", sql, text, written, sent))
    return bad


def _name(sql: str) -> str:
    return sql.removeprefix("SELECT ").split("(", 1)[0].strip().lower()


def test_every_known_function_runs_as_written(runner: Runner) -> None:
    """Every pg_catalog function sqlglot has a node for, in every shape: same rows or refused."""
    signatures = _signatures(runner.conn)
    names = sorted(n for n in signatures if n in ARITY and n not in CATALOG)
    assert len(names) > 150  # the sweep ran over the table
    statements = [sql for n in names for sql in _calls(n, signatures[n])]
    assert not _differences(runner, statements, _name)
    assert len(statements) > 1300


# Where ARITY counts what the user writes, not pg_proc's arguments: an ordered-set aggregate's
# direct arguments (the rest go in WITHIN GROUP), unnest's several arrays (FROM unnest(a, b)).
WRITTEN_COUNT = {"percentile_cont": (1, 1), "percentile_disc": (1, 1), "mode": (0, 0),
                 "unnest": (1, None)}  # fmt: skip


def test_arity_table_is_postgresql_own(runner: Runner) -> None:
    """ARITY is pg_proc's range for every pg_catalog function sqlglot reads into a node of its
    own (a sqlglot upgrade that learns a new name, or a typo in the table, fails here)."""
    rows = runner.conn.execute(
        "SELECT p.proname, min(p.pronargs - p.pronargdefaults), max(p.pronargs),"
        " bool_or(p.provariadic <> 0) FROM pg_proc p"
        " WHERE p.pronamespace = 'pg_catalog'::regnamespace GROUP BY 1"
    ).fetchall()
    checked = 0
    for name, low, high, variadic in rows:
        if not str(name).isidentifier() or not _sqlglot_knows(str(name)):
            continue
        if name in arities._NO_CALL:  # char(...), interval(...): a syntax error in PostgreSQL
            continue
        checked += 1
        want = WRITTEN_COUNT.get(name, (int(low), None if variadic else int(high)))
        assert ARITY.get(name) == want, name
    assert checked > 150


def _sqlglot_knows(name: str) -> bool:
    for k in (1, 2, 3):
        try:
            call = sqlglot.parse_one(f"SELECT {name}({', '.join('x' * k)})", read="postgres")
        except sqlglot.errors.SqlglotError:
            return True
        if not isinstance(call.selects[0], exp.Anonymous):
            return True
    return False


def test_other_databases_names_are_refused(runner: Runner) -> None:
    """Names sqlglot maps from other databases (ifnull, nvl, len, ...): PostgreSQL has none of
    them; dpsql refuses each (42883), never runs the mapped function."""
    keywords = {"collate", "first", "variadic"}  # PostgreSQL's keywords: sent, and refused there
    names = sorted(n for n in NOT_POSTGRES - keywords if n.isidentifier() and "_" not in n[:2])
    statements = [f"SELECT {n}({', '.join(PLAIN[:k])})" for n in names for k in (1, 2, 3)]
    outcomes = [runner.both(sql) for sql in statements]
    ran = [
        (sql, text)
        for sql, (w, s, text) in zip(statements, outcomes, strict=True)
        if s.kind == "ok"
    ]
    assert not ran
    assert all(w.kind == "err" for w, _, _ in outcomes)
    refused = [s.value for _, s, _ in outcomes if s.kind == "refused"]
    assert set(refused) <= {"42883", "42601"}
    assert len(refused) == len(statements), [
        (sql, s) for sql, (_, s, _) in zip(statements, outcomes, strict=True) if s.kind != "refused"
    ]


def test_special_forms_run_as_written(runner: Runner) -> None:
    """The grammar's own forms (FROM/FOR/IN/PLACING, named arguments, aggregate ORDER BY,
    WITHIN GROUP, typmod casts, AT TIME ZONE, COLLATE, IS DISTINCT FROM, ...) and the renames
    sqlglot makes (log, trunc, div, date_part, regexp_like, substr with a negative start, ...),
    over a small public table: same rows, or refused where PostgreSQL refuses."""
    forms = [f.strip() for line in FORMS.strip().splitlines() for f in line.split(" | ")]
    statements = [f"SELECT {f} FROM pt" for f in forms]
    bad = _differences(runner, statements, lambda sql: sql)
    assert not bad, bad
    assert len(statements) > 220


def _written_vs_sent(runner: Runner, sql: str) -> tuple[Outcome, Outcome]:
    written, sent, _ = runner.both(sql)
    return written, sent


def test_a_loosened_table_is_caught(runner: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken twin: with round's or string_agg's entry loosened (or ifnull taken for a
    PostgreSQL function), the same comparisons find statements run as something else. The
    constants check (dpsql.sql.pg_reading.check_same_constants) is off here: it refuses
    round(7, 2, 3) by itself since const27 (the 3 would not be sent), and this twin tests the
    comparisons, not that second line."""
    monkeypatch.setattr(parse_module, "check_same_constants", lambda text, pg, tree: None)
    signatures = _signatures(runner.conn)
    monkeypatch.setitem(ARITY, "round", (0, None))
    monkeypatch.setitem(ARITY, "string_agg", (1, 2))
    monkeypatch.setattr(arities, "NOT_POSTGRES", NOT_POSTGRES - {"ifnull"})
    monkeypatch.setitem(ARITY, "ifnull", (1, None))
    statements = [
        *_calls("round", signatures["round"]),
        *_calls("string_agg", signatures["string_agg"]),
        "SELECT ifnull(7, 2)",
    ]
    bad = _differences(runner, statements, _name)
    caught = {sql for _, sql, *_ in bad}
    assert "SELECT round(7, 2, 3)" in caught  # ran as ROUND(7, 2)
    assert "SELECT string_agg('abc') FROM (VALUES (1)) v(x)" in caught  # ran with ','
    assert "SELECT ifnull(7, 2)" in caught  # ran as COALESCE(7, 2)


def test_refusals_say_what_postgresql_says(runner: Runner) -> None:
    """The refusals name the function as written, with PostgreSQL's SQLSTATE."""
    cases = {
        "SELECT round(n, 1, 2) FROM pt": ("42883", "function round with 3 arguments"),
        "SELECT string_agg(s) FROM pt": ("42883", "function string_agg with 1 argument"),
        "SELECT log10() FROM pt": ("42883", "function log10 with 0 arguments"),
        "SELECT ifnull(s, 'x') FROM pt": ("42883", "function ifnull does not exist"),
        "SELECT position('b', s) FROM pt": ("42601", 'syntax error at or near ","'),
        "SELECT current_user()": ("42601", 'syntax error at or near "("'),
        "SELECT percentile_cont(n, 0.5) FROM pt": ("42809", "WITHIN GROUP is required"),
        "SELECT regexp_like(s, 'b', 'ig') FROM pt": ("0A000", "regexp_like with flags"),
    }
    for sql, (state, words) in cases.items():
        written, sent = _written_vs_sent(runner, sql)
        assert written.kind == "err", sql
        assert sent == Outcome("refused", state), (sql, sent)
        with pytest.raises(DpsqlError) as e:
            runner.engine.prepare_in_scope(sql, "")
        assert words in str(e.value), (sql, str(e.value))
        assert "Coalesce" not in str(e.value) and "Least" not in str(e.value)
    assert written.value  # PostgreSQL's own refusal ran


def test_sqlglot_still_rewrites_them() -> None:
    """Why the checks exist: sqlglot (as pinned) still writes these calls as something else;
    if it stops, the checks stay right (they refuse what PostgreSQL refuses)."""
    changed = 0
    for sql in ("SELECT round(a, 1, 2)", "SELECT string_agg(s)", "SELECT ifnull(a, b)",
                "SELECT log10()", "SELECT position('a', s)", "SELECT min(a, b)"):  # fmt: skip
        out = sqlglot.parse_one(sql, read="postgres").sql("postgres")
        changed += out.upper() != sql.upper()
    assert changed >= 5
    assert isinstance(
        sqlglot.parse_one("SELECT ifnull(a, b)", read="postgres").selects[0], exp.Coalesce
    )
