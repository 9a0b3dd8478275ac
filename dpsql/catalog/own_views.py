"""dpsql's own views in the catalog, for a query that names them: ``\\d dpsql.history``.

``dpsql.budget`` and ``dpsql.history`` are answered by dpsql itself (the analyst's ledger rows:
:mod:`dpsql.budget.route`), not by an upstream relation, so psql's ``\\d dpsql.history`` found
no relation named so. A catalog query that names them (a string constant with ``dpsql`` in it,
as psql's ``nspname OPERATOR(pg_catalog.~) '^(dpsql)$'``, or one of their object ids, as its
next queries by ``c.oid = '4294967002'``) reads them as views of a schema ``dpsql``: rows of
``pg_namespace``, ``pg_class`` (relkind ``v``) and ``pg_attribute`` built here from constants
(the columns and PostgreSQL types the views answer with; ``tests/unit/catalog`` checks them
against :data:`dpsql.budget.views.HISTORY_COLUMNS` and ``BUDGET_COLUMNS`` each run), appended
to the filtered relations (``UNION ALL``). A query that reads ``pg_namespace`` alone (psql's
``\\dn``, a driver's list of schemas) gets the schema's row unnamed too (newcomer25 #15: ``\\dn``
listed ``public`` alone while ``\\d dpsql.history`` described a view in ``dpsql``). Nothing
here reads data; other catalog queries are as before (a tool listing every table does not see
the views, as ``\\dv`` lists no view outside the search path: the catalog lists the policy's
tables). Their object ids are at the top of the 32-bit range, which PostgreSQL hands out last.
"""

from __future__ import annotations

import json

from sqlglot import exp

OWN_SCHEMA = "dpsql"
OWN_SCHEMA_OID = 4294967000
_TEXT, _TSTZ, _NUMERIC, _BIGINT, _BOOL = 25, 1184, 1700, 20, 16
# name -> (object id, its columns: name and type oid), as dpsql answers the view
OWN_VIEWS: dict[str, tuple[int, tuple[tuple[str, int], ...]]] = {
    "budget": (4294967001, (
        ("budget", _TEXT), ("name", _TEXT), ("period", _TEXT), ("period_start", _TSTZ),
        ("period_end", _TSTZ), ("epsilon_limit", _NUMERIC), ("epsilon_spent", _NUMERIC),
        ("epsilon_remaining", _NUMERIC), ("delta_limit", _NUMERIC),
        ("delta_explicit_limit", _NUMERIC), ("delta_spent", _NUMERIC),
        ("delta_remaining", _NUMERIC), ("rho_spent", _NUMERIC), ("renyi_order", _NUMERIC),
        ("renyi_spent", _NUMERIC), ("releases", _BIGINT),
    )),
    "history": (4294967002, (
        ("id", _BIGINT), ("released_at", _TSTZ), ("fingerprint", _TEXT), ("mechanism", _TEXT),
        ("epsilon", _NUMERIC), ("delta", _NUMERIC), ("rho", _NUMERIC), ("cached", _BOOL),
        ("state", _TEXT), ("statement", _TEXT), ("outcome", _TEXT),
    )),
}  # fmt: skip
_OIDS = {str(OWN_SCHEMA_OID), *(str(oid) for oid, _ in OWN_VIEWS.values())}
_LENGTHS = {_TEXT: -1, _TSTZ: 8, _NUMERIC: -1, _BIGINT: 8, _BOOL: 1}


def names_own_views(query: exp.Expr) -> bool:
    """Does catalog query ``query`` name dpsql's own schema or views (a string constant with
    ``dpsql`` in it, or one of their object ids)?"""
    for lit in query.find_all(exp.Literal):
        text = str(lit.this)
        if text in _OIDS or (lit.is_string and OWN_SCHEMA in text.lower()):
            return True
    return False


def _rows(name: str) -> list[dict[str, object]] | None:
    if name == "pg_namespace":
        return [{"oid": OWN_SCHEMA_OID, "nspname": OWN_SCHEMA, "nspowner": 10}]
    if name == "pg_class":
        return [
            {
                "oid": oid,
                "relname": view,
                "relnamespace": OWN_SCHEMA_OID,
                "reltype": 0,
                "reloftype": 0,
                "relowner": 10,
                "relam": 0,
                "relfilenode": 0,
                "reltablespace": 0,
                "relpages": 0,
                "reltuples": -1,
                "relallvisible": 0,
                "reltoastrelid": 0,
                "relhasindex": False,
                "relisshared": False,
                "relpersistence": "p",
                "relkind": "v",
                "relnatts": len(cols),
                "relchecks": 0,
                "relhasrules": False,
                "relhastriggers": False,
                "relhassubclass": False,
                "relrowsecurity": False,
                "relforcerowsecurity": False,
                "relispopulated": True,
                "relreplident": "n",
                "relispartition": False,
                "relrewrite": 0,
                "relfrozenxid": "0",
                "relminmxid": "0",
            }  # fmt: skip
            for view, (oid, cols) in OWN_VIEWS.items()
        ]
    if name == "pg_attribute":
        return [
            {"attrelid": oid, "attname": col, "atttypid": typ, "attlen": _LENGTHS[typ],
             "attnum": i, "attndims": 0, "attcacheoff": -1, "atttypmod": -1,
             "attbyval": typ in (_BIGINT, _BOOL, _TSTZ), "attalign": "d" if typ != _BOOL else "c",
             "attstorage": "x" if _LENGTHS[typ] < 0 else "p", "attcompression": "",
             "attnotnull": False, "atthasdef": False, "atthasmissing": False,
             "attidentity": "", "attgenerated": "", "attisdropped": False, "attislocal": True,
             "attinhcount": 0, "attstattarget": -1, "attcollation": 100 if typ == _TEXT else 0}
            for oid, cols in OWN_VIEWS.values()
            for i, (col, typ) in enumerate(cols, start=1)
        ]  # fmt: skip
    return None


def with_own_rows(name: str, filtered: exp.Select) -> exp.Expr:
    """``filtered`` (the client's view of ``pg_catalog.name`` over its alias ``t``) with dpsql's
    own schema, views or their columns appended; ``filtered`` itself for other relations."""
    rows = _rows(name)
    if rows is None:
        return filtered
    source = exp.Table(
        this=exp.Anonymous(
            this="jsonb_populate_recordset",
            expressions=[
                exp.Cast(this=exp.null(), to=exp.DataType.build(f"pg_catalog.{name}", udt=True)),
                exp.Cast(this=exp.Literal.string(json.dumps(rows)), to=exp.DataType.build("jsonb")),
            ],
        ),
        alias=exp.TableAlias(this=exp.to_identifier("t")),
    )
    own = filtered.copy()
    own.set("from_", exp.From(this=source))
    own.set("where", None)
    if not (filtered.args.get("offset") or filtered.args.get("limit")):
        return exp.union(filtered, own, distinct=False)
    # an overridden relation's form ends in OFFSET 0 (catalog/overrides.py): each side in
    # parentheses, as SQL requires before UNION
    return exp.union(exp.Subquery(this=filtered), exp.Subquery(this=own), distinct=False)
