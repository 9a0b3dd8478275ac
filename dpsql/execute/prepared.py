"""A prepared statement: parsed, classified and (for private queries) analyzed, immutable.

:data:`Prepared` is what :meth:`dpsql.engine.Engine.prepare` returns and caches: a closed union
of one frozen class per kind of statement (``match`` on the class); every later step (describe,
execute, EXPLAIN) reads it and never changes it. ``kind`` (its class's, from :data:`KINDS`)
names the kind in logs and on the wire.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import date
from typing import ClassVar, Literal

from sqlglot import exp

from dpsql.errors import DpsqlError
from dpsql.sql.analysis import Analysis
from dpsql.sql.explain_options import ExplainOptions
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.parse import ParsedStatement
from dpsql.sql.tree import Split

Kind = Literal["private", "public", "catalog", "dpsql", "session", "empty", "explain"]


@dataclass(frozen=True, kw_only=True)
class _Common:
    """What every prepared statement has (the wire reads these of any kind)."""

    text: str
    statement: ParsedStatement
    fingerprint: str  # a short stable id of the statement's shape (logs, the ledger)
    scope: str = ""  # the analyst whose view of the policy classified it ("" = the whole policy)
    # the time zone it was analyzed in (dpsql.upstream.zone.ZONE: generated date_trunc keys)
    zone: str = "UTC"
    # the UTC day of dpsql's clock its analysis read (dpsql.clock), None if it read none: a
    # statement analyzed on another day is analyzed again (Engine.current)
    clock_day: date | None = None

    @property
    def first_word(self) -> str:
        return self.statement.first_word

    @property
    def kind(self) -> Kind:
        """The kind of statement (:data:`KINDS`), as logs and the wire name it."""
        return KINDS[type(self)]


@dataclass(frozen=True, kw_only=True)
class _Parsed(_Common):
    """A statement with a tree (its parameters numbered ``$1`` .. ``$param_count``)."""

    tree: exp.Expr
    param_count: int


@dataclass(frozen=True, kw_only=True)
class _Treeless(_Common):
    """A statement with nothing to parse further and no parameters."""

    tree: ClassVar[None] = None
    param_count: ClassVar[int] = 0


_VARIANTS = 16  # catalog variants kept per statement (catalog_analysis)


@dataclass(frozen=True, kw_only=True)
class PrivateQuery(_Parsed):
    """One flat aggregate block over private tables, analyzed: answered with DP noise."""

    analysis: Analysis
    # a leaf over per-unit derived tables (dpsql.sql.per_unit): each synthetic table's name and
    # the per-unit SELECT that stands for it in the bounded SQL
    units: tuple[tuple[str, exp.Select], ...] = ()

    def catalog_analysis(
        self, unique_id: str, proven: tuple[str, ...], proof_id: str = ""
    ) -> Analysis:
        """``analysis`` with the catalog's proofs in force: one row per unit (``unique_id``, the
        proof's identity: :data:`dpsql.execute.unique_units.UNIQUE_UNIT_SQL`; '' for none), the
        values of columns ``proven`` within their declared bounds (``proven_bounds``:
        :mod:`dpsql.sql.check_bounds`, proved by ``proof_id``); one object per statement and
        proofs' identities, so what is memoized for it (:meth:`is_own`) is never reused under
        another proof: a plan that took one key is not run after that key was dropped and made
        again (its check would refuse every run)."""
        if not unique_id and not proven:
            return self.analysis
        variants: dict[tuple[str, tuple[str, ...], str], Analysis] = self.__dict__.setdefault(
            "_catalog_variants", {}
        )
        key = (unique_id, proven, proof_id)
        hit = variants.get(key)
        if hit is None:
            hit = replace(
                self.analysis,
                unique_unit=bool(unique_id),
                unique_proof_id=unique_id,
                proven_bounds=proven,
                proof_id=proof_id,
            )
            hit = variants.setdefault(key, hit)
            for old in list(variants)[:-_VARIANTS]:  # proofs of the past (each DDL makes one)
                variants.pop(old, None)
        return hit

    def is_own(self, a: Analysis) -> bool:
        """Whether ``a`` is this statement's own analysis (no parameters bound, no bounds
        chosen), with or without the catalog's proofs: what is derived from it may be
        memoized."""
        if a is self.analysis:
            return True
        return any(a is v for v in self.__dict__.get("_catalog_variants", {}).values())


@dataclass(frozen=True, kw_only=True)
class TreeQuery(_Parsed):
    """A private statement of several DP leaves (dpsql.sql.tree): the split statement and each
    leaf prepared as a private query of its own; the rest runs over their noisy rows."""

    split: Split
    leaves: tuple[PrivateQuery, ...]


@dataclass(frozen=True, kw_only=True)
class PublicQuery(_Parsed):
    """A statement over public tables only (and zero-row shapes of private ones): run as is."""


@dataclass(frozen=True, kw_only=True)
class DeferredQuery(_Parsed):
    """A private statement classified when its values are bound, as the same statement with
    them written inline (:meth:`dpsql.engine.Engine.bound_limit`): a zero-row shape whose LIMIT
    is a parameter (``SELECT * FROM t LIMIT $1``, as SQLAlchemy sends it; ``deferred`` is the
    refusal of any value but 0), or an aggregate over a parameter (``SUM(quantity / $1)``:
    :mod:`dpsql.sql.aggregate_params`; ``deferred`` is the refusal of the statement as written).

    ``param_oids``: the type of each ``$n`` written into an aggregate's argument, 0 where none
    is known: PostgreSQL's inference at prepare (the other operand's type), the Parse's
    declared types once a wire session has them (:func:`dpsql.wire.params.typed_deferred`)."""

    deferred: DpsqlError
    param_oids: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CatalogQuery(_Parsed):
    """A statement over the system catalogs: rewritten to what the analyst may see."""


@dataclass(frozen=True, kw_only=True)
class LedgerQuery(_Common):
    """``SHOW dpsql.budget`` / ``dpsql.budget`` / ``dpsql.history``: the analyst's own ledger."""

    tree: exp.Expr | None = None  # None for SHOW dpsql.budget
    param_count: int = 0


@dataclass(frozen=True, kw_only=True)
class SessionCommand(_Treeless):
    """A session statement the engine does not answer (the wire session handles its own)."""


@dataclass(frozen=True, kw_only=True)
class EmptyQuery(_Treeless):
    """A statement of nothing but whitespace and comments."""


@dataclass(frozen=True, kw_only=True)
class ExplainQuery(_Common):
    """``EXPLAIN <statement>``: the explained statement, prepared as itself, and the options."""

    inner: Explained
    explain: ExplainOptions

    @property
    def tree(self) -> exp.Expr:
        return self.inner.tree

    @property
    def param_count(self) -> int:
        return self.inner.param_count


Explained = PrivateQuery | TreeQuery | PublicQuery | CatalogQuery | DeferredQuery
"""What EXPLAIN explains: a query."""

KINDS: dict[type[_Common], Kind] = {
    PrivateQuery: "private", TreeQuery: "private", DeferredQuery: "private", PublicQuery: "public",
    CatalogQuery: "catalog", LedgerQuery: "dpsql", SessionCommand: "session", EmptyQuery: "empty",
    ExplainQuery: "explain",
}  # fmt: skip
"""The kind of each class of prepared statement (``kind``): "private" for every statement over
private tables."""

Query = Explained | LedgerQuery
"""What answers with rows, so what a cursor or a COPY may read: every kind but a session command,
an empty statement and EXPLAIN."""

PrivateStatement = PrivateQuery | TreeQuery | DeferredQuery
"""The statements over private tables (``kind`` "private"): ``isinstance(p, PrivateStatement)``."""

Prepared = (
    PrivateQuery
    | TreeQuery
    | DeferredQuery
    | PublicQuery
    | CatalogQuery
    | LedgerQuery
    | SessionCommand
    | EmptyQuery
    | ExplainQuery
)
"""A parsed, classified and (for private queries) analyzed statement, one class per kind:
immutable and cacheable; :meth:`dpsql.engine.Engine.prepare` returns it, every later step
(describe, execute, EXPLAIN) reads it and dispatches on its class."""


def fingerprint(tree: exp.Expr | None, text: str, written: str | None = None) -> str:
    """A short stable id of a statement's shape (literals kept; used in logs and the ledger):
    of ``tree`` as dpsql writes it (``written`` where the caller has it already: the parse's
    :attr:`~dpsql.sql.parse.ParsedQuery.written` of this very tree), else of ``text``."""
    body = written if written is not None else tree.sql(POSTGRES) if tree is not None else text
    return hashlib.sha256(body.encode()).hexdigest()[:16]
