"""Definitions of visible objects never name hidden ones.

A visible view, rule, index, default, check, trigger or row-level policy may be defined over a hidden
table (``salaries``), a hidden function (schema ``hr``) or a sequence no policy declares: its
definition is then NULL (a view stays listed) or the object is absent (a rule, default, check or
policy), through every function and view that prints definitions. Function bodies other than
PostgreSQL's own are never shown (opaque text that may name tables or hold data).
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext
from tests.policies import build_policy

SETUP = """
CREATE SCHEMA hr;
CREATE FUNCTION hr.f(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1';
CREATE SEQUENCE salaries_seq;
CREATE TABLE salaries (x int);
CREATE TABLE shop (code text PRIMARY KEY, n int DEFAULT nextval('salaries_seq'),
                   m int DEFAULT 3 CHECK (m > 0), k int CHECK (hr.f(k) > 0));
CREATE INDEX shop_bad ON shop (hr.f(k));
CREATE COLLATION hr.coll FROM "C";
CREATE OPERATOR hr.=== (LEFTARG = int, RIGHTARG = int, FUNCTION = int4eq);
CREATE TEXT SEARCH CONFIGURATION hr.tsc (COPY = english);
CREATE INDEX shop_bad_coll ON shop (code COLLATE hr.coll);
CREATE INDEX shop_bad_pred ON shop (m) WHERE m OPERATOR(hr.===) 1;
CREATE INDEX shop_bad_ts ON shop (to_tsvector('hr.tsc'::regconfig, code));
CREATE INDEX shop_bad_row ON shop ((CAST(ROW(k) AS salaries)));
ALTER TABLE shop ADD CONSTRAINT shop_bad_check CHECK (k OPERATOR(hr.===) k);
CREATE VIEW v_bad_coll AS SELECT code COLLATE hr.coll AS c FROM shop;
CREATE DOMAIN hr.dom AS int;
CREATE FUNCTION pubf(x hr.dom) RETURNS int LANGUAGE sql AS 'SELECT 1';
CREATE INDEX shop_ok ON shop (abs(m));
CREATE DOMAIN d_bad AS int DEFAULT nextval('salaries_seq');
CREATE DOMAIN d_ok AS int DEFAULT 7;
CREATE VIEW v_ok AS SELECT code FROM shop;
CREATE VIEW v_bad AS SELECT s.code FROM shop s JOIN salaries x ON x.x = s.m;
CREATE MATERIALIZED VIEW mv_bad AS SELECT count(*) AS n FROM salaries;
CREATE RULE r_bad AS ON UPDATE TO shop DO ALSO INSERT INTO salaries VALUES (1);
CREATE FUNCTION g() RETURNS int LANGUAGE sql AS 'SELECT count(*)::int FROM salaries';
CREATE FUNCTION tf() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE TRIGGER t_ok BEFORE INSERT ON shop FOR EACH ROW EXECUTE FUNCTION tf();
CREATE TRIGGER t_bad BEFORE UPDATE ON shop FOR EACH ROW WHEN (hr.f(NEW.m) > 0)
  EXECUTE FUNCTION tf();
ALTER TABLE shop ENABLE ROW LEVEL SECURITY;
CREATE POLICY p_bad ON shop USING (EXISTS (SELECT 1 FROM salaries));
CREATE POLICY p_ok ON shop USING (m > 0);
"""
SECRETS = ("salaries", "hr.", "count(")


@pytest.fixture(scope="module")
def eng(make_db) -> Iterator[Engine]:  # type: ignore[no-untyped-def]
    dsn = make_db("defs")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SETUP)  # type: ignore[arg-type]
    public = ["shop", "v_ok", "v_bad", "mv_bad", "v_bad_coll"]
    policy = build_policy(base={}, public_tables=public)
    e = Engine(policy, dsn, pool_size=2)
    yield e
    e.close()


def rows(e: Engine, text: str) -> list[tuple[object, ...]]:
    try:
        return list(e.execute(e.prepare(text, "ann"), SessionContext(analyst="ann")).rows)
    except DpsqlError as err:
        raise AssertionError(f"{text}: {err.sqlstate} {err.message}") from err


QUERIES = [
    "SELECT pg_get_viewdef('v_bad'), pg_get_viewdef('v_bad'::regclass, true), "
    "pg_get_viewdef('mv_bad')",
    "SELECT viewname, definition FROM pg_views WHERE schemaname = 'public'",
    "SELECT matviewname, definition FROM pg_matviews",
    "SELECT * FROM information_schema.views WHERE table_schema = 'public'",
    "SELECT rulename, pg_get_ruledef(oid) FROM pg_rewrite WHERE ev_class = 'shop'::regclass",
    "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'shop'::regclass",
    "SELECT * FROM information_schema.check_constraints WHERE constraint_schema = 'public'",
    "SELECT column_name, column_default FROM information_schema.columns WHERE table_name = 'shop'",
    "SELECT c.* FROM information_schema.columns c WHERE table_name = 'shop'",
    "SELECT adnum, pg_get_expr(adbin, adrelid) FROM pg_attrdef",
    "SELECT proname, prosrc, pg_get_functiondef(oid) FROM pg_proc WHERE proname IN ('g', 'tf')",
    "SELECT p.* FROM pg_proc p WHERE proname = 'g'",
    "SELECT routine_name, routine_definition FROM information_schema.routines "
    "WHERE routine_schema = 'public'",
    "SELECT tgname, pg_get_triggerdef(oid), pg_get_triggerdef(oid, true) FROM pg_trigger",
    "SELECT * FROM information_schema.triggers",
    "SELECT * FROM pg_policies",
    "SELECT polname, pg_get_expr(polqual, polrelid) FROM pg_policy",
    "SELECT indexrelid::regclass, pg_get_indexdef(indexrelid) FROM pg_index "
    "WHERE indrelid = 'shop'::regclass",
    "SELECT pg_get_indexdef(to_regclass('shop_bad'))",
    "SELECT * FROM pg_indexes WHERE tablename = 'shop'",
    # a function whose signature names a hidden type is absent (its arguments print the type)
    "SELECT proname, pg_get_function_arguments(oid), pg_get_function_identity_arguments(oid) "
    "FROM pg_proc WHERE pronamespace = 'public'::regnamespace",
    "SELECT 'pubf'::regproc, to_regprocedure('pubf(int)'), pg_get_function_arguments('pubf'::regproc)",
    "SELECT * FROM information_schema.routines WHERE routine_schema = 'public'",
    "SELECT * FROM information_schema.parameters WHERE specific_schema = 'public'",
    "SELECT c.relname, pg_get_indexdef(c.oid) FROM pg_class c WHERE c.relkind = 'i' "
    "AND c.relname LIKE 'shop%'",
    "SELECT pg_get_indexdef(i.indexrelid, 0, true), pg_get_expr(i.indpred, i.indrelid), "
    "pg_get_expr(i.indexprs, i.indrelid) FROM pg_index i",
    "SELECT pg_get_viewdef('v_bad_coll'), pg_get_constraintdef(oid) FROM pg_constraint",
    "SELECT typname, typdefault FROM pg_type WHERE typname LIKE 'd\\_%'",
    "SELECT t.* FROM pg_type t WHERE typname = 'd_bad'",
    "SELECT domain_name, domain_default FROM information_schema.domains",
]


@pytest.mark.parametrize("text", QUERIES)
def test_definitions_name_nothing_hidden(eng: Engine, text: str) -> None:
    try:
        got = repr(rows(eng, text))
    except AssertionError as refused:  # a name not listed fails as a missing one (42883 ...)
        got = str(refused)
    for secret in SECRETS:
        assert secret not in got, (secret, got)


def test_definitions_of_visible_things_are_kept(eng: Engine) -> None:
    assert rows(eng, "SELECT pg_get_viewdef('v_ok') LIKE '%FROM shop%'") == [(True,)]
    listed = rows(eng, "SELECT viewname, definition IS NULL FROM pg_views "
                       "WHERE schemaname = 'public' ORDER BY 1")  # fmt: skip
    assert listed == [("v_bad", True), ("v_bad_coll", True), ("v_ok", False)]  # listed, no def
    defaults = rows(eng, "SELECT column_name, column_default FROM information_schema.columns "
                         "WHERE table_name = 'shop' ORDER BY 1")  # fmt: skip
    assert ("m", "3") in defaults and ("n", None) in defaults
    checks = rows(eng, "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                       "WHERE conrelid = 'shop'::regclass AND contype = 'c'")  # fmt: skip
    assert checks == [("CHECK ((m > 0))",)]
    assert rows(eng, "SELECT tgname FROM pg_trigger") == [("t_ok",)]
    domains = rows(eng, "SELECT domain_name, domain_default FROM information_schema.domains "
                        "WHERE domain_schema = 'public' ORDER BY 1")  # fmt: skip
    assert domains == [("d_bad", None), ("d_ok", "7")]
    indexes = rows(eng, "SELECT indexname FROM pg_indexes WHERE tablename = 'shop' ORDER BY 1")
    assert indexes == [("shop_ok",), ("shop_pkey",)]


# The same listing, every way a client can ask: an index whose definition names a hidden object
# is absent (as a hidden table's index is), not listed with a blank definition.
INDEX_LISTINGS = [
    "SELECT relname FROM pg_class WHERE relkind = 'i' AND relname LIKE 'shop%' ORDER BY 1",
    "SELECT indexname FROM pg_indexes WHERE tablename = 'shop' ORDER BY 1",
    "SELECT CAST(indexrelid AS regclass) FROM pg_index WHERE indrelid = 'shop'::regclass "
    "ORDER BY 1",
    "SELECT c2.relname FROM pg_class c JOIN pg_index i ON c.oid = i.indrelid "
    "JOIN pg_class c2 ON c2.oid = i.indexrelid WHERE c.relname = 'shop' ORDER BY 1",
    "SELECT x FROM unnest(ARRAY['shop_ok', 'shop_pkey', 'shop_bad', 'shop_bad_coll', "
    "'shop_bad_pred', 'shop_bad_ts', 'shop_bad_row']) AS x WHERE to_regclass(x) IS NOT NULL "
    "ORDER BY 1",
]


@pytest.mark.parametrize("text", INDEX_LISTINGS)
def test_indexes_naming_hidden_objects_are_absent(eng: Engine, text: str) -> None:
    assert sorted(str(r[0]) for r in rows(eng, text)) == ["shop_ok", "shop_pkey"]


def test_checks_and_views_naming_hidden_operators_or_collations(eng: Engine) -> None:
    checks = rows(eng, "SELECT conname FROM pg_constraint WHERE conrelid = 'shop'::regclass "
                       "AND contype = 'c' ORDER BY 1")  # fmt: skip
    assert ("shop_bad_check",) not in checks and checks
    assert rows(eng, "SELECT pg_get_viewdef('v_bad_coll') IS NULL") == [(True,)]
    assert rows(eng, "SELECT policyname FROM pg_policies") == [("p_ok",)]
    builtin = rows(eng, "SELECT prosrc, pg_get_functiondef(oid) IS NOT NULL FROM pg_proc "
                        "WHERE oid = 'int4in'::regproc")  # fmt: skip
    assert builtin == [("int4in", True)]


def test_functions_with_hidden_types_in_their_signature_are_absent(eng: Engine) -> None:
    for text, present in (
        ("SELECT routine_name FROM information_schema.routines WHERE routine_schema = 'public'",
         "tf"),
        ("SELECT DISTINCT specific_name FROM information_schema.parameters "
         "WHERE specific_schema = 'public'", ""),
        ("SELECT proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace", "tf"),
    ):  # fmt: skip
        names = " ".join(str(r[0]) for r in rows(eng, text))
        assert "pubf" not in names and present in names, (text, names)
