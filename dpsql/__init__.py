"""dpsql: a differentially private SQL proxy for PostgreSQL.

A statement travels socket -> :mod:`dpsql.wire` -> :mod:`dpsql.engine` (stages in
:mod:`dpsql.execute` over :mod:`dpsql.sql`, :mod:`dpsql.catalog`, :mod:`dpsql.budget`,
:mod:`dpsql.dp`) -> :mod:`dpsql.wire` -> socket; docs/architecture.md follows one from end to end.
The layering is a contract checked in CI (``[tool.importlinter]`` in pyproject.toml).
"""

__version__ = "0.1.0"
