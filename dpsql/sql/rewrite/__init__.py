"""Rewrite passes: one pass per module, each a pure function over sqlglot trees.

The pipeline (``private_query``) turns an :class:`~dpsql.sql.analysis.Analysis` into the SQL that
PostgreSQL runs: the rows read (``source_rows``: tables and joins, joined private tables capped
per unit), total row-level expressions (``make_total``; its dates and times ``total_dates``), clamped values, bounded contributions, one row per group
(and, for quantiles and mode, one row per group and bucket: ``bucket_values``).
"""

from sqlglot import exp

from dpsql.sql.analysis import Analysis
from dpsql.sql.rewrite.bound_contributions import bound_contributions
from dpsql.sql.rewrite.bucket_values import bucket_values


def private_query(a: Analysis, salt: str) -> exp.Select:
    """The full private SQL for an analysis (pure; ``salt`` orders group choices)."""
    return bucket_values(bound_contributions(a, salt), a)


__all__ = ["private_query"]
