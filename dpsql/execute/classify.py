"""Which path a parsed statement takes: the DP engine (private), a public pass-through, catalog
introspection (:mod:`dpsql.catalog`) or dpsql's own views (``dpsql.*``, :mod:`dpsql.budget.route`)."""

from __future__ import annotations

from typing import Literal

from sqlglot import exp

from dpsql.catalog.check import is_catalog_query, names_objects
from dpsql.errors import PrivacyViolation
from dpsql.policy.model import Policy
from dpsql.sql.tables import referenced_tables, undefined_table

QueryKind = Literal["private", "public", "catalog", "dpsql"]

CATALOG_SCHEMAS = frozenset({"pg_catalog", "information_schema"})


def classify(tree: exp.Expr, policy: Policy) -> QueryKind:
    """Private if any private table is read; catalog if only catalogs; public otherwise."""
    tables = referenced_tables(tree)
    kinds = set()
    for name, node in tables:
        schema = name.split(".")[0]
        if policy.private_table(name) is not None:
            kinds.add("private")
        elif schema in CATALOG_SCHEMAS:
            kinds.add("catalog")
        elif schema == "dpsql":
            kinds.add("dpsql")
        elif policy.is_public(name):
            kinds.add("public")
        else:
            raise undefined_table(node)
    if "private" in kinds:
        if kinds & {"catalog", "dpsql"}:
            raise PrivacyViolation(
                "a query may not combine private tables with catalog or dpsql tables",
                hint="query the catalog (or dpsql's views) and the private tables in separate "
                "statements",
            )
        return "private"
    if "dpsql" in kinds:
        return "dpsql"
    if "catalog" in kinds:
        return "catalog"
    if is_catalog_query(tree) or names_objects(tree):
        # no catalog relation, but reg* casts or catalog functions (g::regclass, obj_description):
        # they reveal object names, so they go through the catalog filter, never the public path
        return "catalog"
    return "public"
