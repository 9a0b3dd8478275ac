"""A prepared statement: parsed, classified and (for private queries) analyzed, immutable.

:class:`Prepared` is what :meth:`dpsql.engine.Engine.prepare` returns and caches; every later
step (describe, execute, EXPLAIN) reads it and never changes it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from dpsql.errors import DpsqlError
from dpsql.sql.analysis import Analysis
from dpsql.sql.explain_options import ExplainOptions
from dpsql.sql.parse import Statement
from dpsql.sql.tree import Split

Kind = Literal["private", "public", "catalog", "dpsql", "session", "empty", "explain"]


@dataclass(frozen=True)
class Prepared:
    """A parsed, classified and (for private queries) analyzed statement. Immutable, cacheable."""

    text: str
    kind: Kind
    statement: Statement
    tree: exp.Expr | None
    analysis: Analysis | None
    param_count: int
    salt: str  # unused since the salt is drawn per execution (dpsql.execute.private_sql.salted)
    fingerprint: str
    scope: str = ""  # the analyst whose view of the policy classified it ("" = the whole policy)
    # kind "explain": the explained statement, prepared as itself, and the EXPLAIN's options
    inner: Prepared | None = None
    explain: ExplainOptions | None = None
    # kind "private" of several DP leaves (dpsql.sql.tree): the split statement and each leaf
    # prepared as a private statement of its own (``analysis`` is then None)
    split: Split | None = None
    leaves: tuple[Prepared, ...] = ()
    # a leaf over per-unit derived tables (dpsql.sql.per_unit): each synthetic table's name and
    # the per-unit SELECT that stands for it in the bounded SQL
    units: tuple[tuple[str, exp.Select], ...] = ()
    # a zero-row shape whose LIMIT is a parameter (``SELECT * FROM t LIMIT $1``): classified
    # when its values are bound, as the same statement with them written inline; this is the
    # refusal of any other value (dpsql.engine.Engine.bound_limit)
    deferred: DpsqlError | None = None

    @property
    def first_word(self) -> str:
        return self.statement.first_word


def fingerprint(tree: exp.Expr | None, text: str) -> str:
    """A short stable id of a statement's shape (literals kept; used in logs and the ledger)."""
    body = tree.sql("postgres") if tree is not None else text
    return hashlib.sha256(body.encode()).hexdigest()[:16]
