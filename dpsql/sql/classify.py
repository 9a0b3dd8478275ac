"""Which path a parsed query takes: the DP engine, a public pass-through, or catalog introspection."""

from __future__ import annotations

from typing import Literal

from sqlglot import exp

from dpsql.errors import PrivacyViolation, UndefinedTable
from dpsql.policy.model import Policy, qualify_name

QueryKind = Literal["private", "public", "catalog", "dpsql"]

CATALOG_SCHEMAS = frozenset({"pg_catalog", "information_schema"})


def _cte_names(tree: exp.Expression) -> set[str]:
    return {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}


def referenced_tables(tree: exp.Expression) -> list[tuple[str, exp.Table]]:
    """(qualified name, node) of every real table the query reads (CTE names excluded)."""
    ctes = _cte_names(tree)
    out = []
    for t in tree.find_all(exp.Table):
        if not t.name or isinstance(t.this, exp.Func):
            continue  # table functions (unnest, generate_series) are checked by their caller
        if not t.db and t.name.lower() in ctes:
            continue
        schema = (t.db or "").lower()
        name = t.name.lower()
        if not schema and (name.startswith("pg_") or name in _INFO_NAMES):
            schema = "pg_catalog"
        out.append((qualify_name(f"{schema or 'public'}.{name}"), t))
    return out


_INFO_NAMES = frozenset()


def classify(tree: exp.Expression, policy: Policy) -> QueryKind:
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
            raise UndefinedTable(
                f'relation "{node.sql("postgres")}" does not exist',
                hint="only the tables declared in the dpsql policy can be queried",
            )
    if "private" in kinds:
        if kinds & {"catalog", "dpsql"}:
            raise PrivacyViolation(
                "a query may not combine private tables with catalog or dpsql tables"
            )
        return "private"
    if "dpsql" in kinds:
        return "dpsql"
    if "catalog" in kinds:
        return "catalog"
    return "public"
