"""Rewrite passes: one pass per module, each a pure function over sqlglot trees.

The pipeline (``private_query``) turns an :class:`~dpsql.sql.analysis.Analysis` into the SQL that
PostgreSQL runs: total row-level expressions, clamped values, bounded contributions, one row per
group.
"""

from dpsql.sql.rewrite.bound_contributions import bound_contributions as private_query

__all__ = ["private_query"]
