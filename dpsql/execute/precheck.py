"""What a private statement checks before any budget is reserved (no private row read).

Key tables the analyst may read, the confidence, a join's fan-out (public tables), the keys'
types, texts and collations (:mod:`dpsql.execute.key_texts`) and the constants PostgreSQL folds
(:mod:`dpsql.execute.constant_probe`): a refusal here charges nothing. The flat path
(:mod:`dpsql.execute.private`) and each leaf of a statement of several (:mod:`dpsql.execute.tree`)
call them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from dpsql.errors import UnsupportedSql
from dpsql.execute import key_texts, privacy_params
from dpsql.execute.group_keys import TEXT_TYPES, check_collation_searches, nondeterministic_text
from dpsql.execute.prepared import PrivateQuery, TreeQuery
from dpsql.session import SessionContext
from dpsql.sql.analysis import Analysis

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext


def check_join_fanout(engine: EngineContext, a: Analysis) -> None:
    """Refuse (54001) a join one unit's rows could blow up (:mod:`dpsql.sql.join_fanout`); each
    public table's fan-out is read from it (public data) at most every ``shadows.REFRESH_S``."""
    import time

    from dpsql.execute.shadows import REFRESH_S
    from dpsql.sql.join_fanout import check_fanout, fanout_sql

    def fanout(j: Any) -> int:
        key = ("fanout", j.table, j.key)
        hit = engine.caches.sql.get(key)
        if hit is None or time.monotonic() - hit[0] > REFRESH_S:
            rows = engine.backend.run(fanout_sql(j), private=False).rows
            hit = (time.monotonic(), int(rows[0][0] or 0) if rows else 0)
            engine.caches.sql.remember(key, hit)
        return int(hit[1])

    check_fanout(a, fanout)


def precheck(
    engine: EngineContext, prepared: PrivateQuery, session: SessionContext, a: Analysis
) -> float:
    """What a private statement checks before any budget is reserved (no private row read):
    key tables the analyst may read, the confidence, a join's fan-out (public tables), and its
    keys' types and public values (:func:`check_leaf_keys`; before ``auto`` bounds are chosen
    too). Returns the confidence."""
    from dpsql.execute import shadows

    key_tables = tuple(g.keys_from.rsplit(".", 1)[0] for g in a.group_keys if g.keys_from)
    scope = engine.scope(session.analyst)
    shadows.check(engine, prepared.text, prepared.tree, key_tables, scope, private=True)
    conf = privacy_params.confidence(engine.policy, session)  # before any budget is reserved
    check_join_fanout(engine, a)  # reads public tables only
    check_leaf_keys(engine, prepared, a)  # types and the catalog only
    check_having_constants(engine, prepared)
    return conf


def check_having_constants(engine: EngineContext, prepared: PrivateQuery | TreeQuery) -> None:
    """A HAVING's constants checked by PostgreSQL before any budget is reserved
    (:mod:`dpsql.execute.constant_probe`): ``HAVING COUNT(*) > 'abc'`` is PostgreSQL's 22P02
    from the constant alone, not an error after the answer was charged. So are the constants
    the planner folds anywhere in the statement (``COUNT(1/0)``, ``SUM(amount % 0)``,
    ``COUNT(1e30::int)``: 22012, 22003), which made_total leaves as written: they would fail
    the charged query. Once per statement."""
    from dpsql.execute.constant_probe import folded_constants

    if prepared.param_count:
        return
    key = ("having", prepared.scope, prepared.text)  # checked (or nothing to check): once
    if engine.caches.key_types.get(key) is not None:
        return
    having = prepared.tree.find(exp.Having)
    if (having is None or having.find(exp.Literal) is None) and not folded_constants(prepared.tree):
        engine.caches.key_types.remember(key, ())
        return
    from dpsql.execute.constant_probe import constant_error

    own = constant_error(engine, prepared.tree)
    if own is not None:
        raise own
    engine.caches.key_types.remember(key, ())


def check_leaf_keys(engine: EngineContext, prepared: PrivateQuery, a: Analysis) -> None:
    """:func:`check_keys` for a leaf of a statement of several (dpsql.execute.tree), before its
    charge (a leaf with grouping sets: the collation check; release() checks its sets' keys)."""
    check_collation_searches(engine, prepared, a)
    key_types = engine.group_types(prepared, a)
    if a.grouping_sets:
        check_keys(engine, a, key_types, [])
        return
    check_keys(engine, a, key_types, engine.declared_keys(a))


def check_keys(
    engine: EngineContext,
    a: Analysis,
    key_types: Sequence[str],
    declared: list[tuple[str | None, ...]] | None,
) -> None:
    """The release's key checks (:mod:`dpsql.execute.key_texts`) before any budget is reserved:
    no two public keys one value; no key selected from the data without a canonical text; no
    text key over a table with a nondeterministic collation (``'a' = 'A'``: a group would print
    as whichever of its texts PostgreSQL kept, and a public key's filter would let the others
    in)."""
    names = [key_texts.key_name(g.expr) for g in a.group_keys]
    n = len(names)
    uses = [
        f"GROUP BY {name}"
        for name, t in zip(names, key_types[:n], strict=True)
        if t in TEXT_TYPES or t == "other"  # (citext, a domain over it: released as text)
    ]
    uses += [  # public candidates compared as text, counted per text
        f"{'mode()' if m.kind == 'mode' else 'COUNT(DISTINCT)'} of {key_texts.key_name(m.arg)}"
        for m in a.measures
        if m.kind in ("mode", "count_keys") and m.arg is not None
    ]
    if uses and nondeterministic_text(engine, a):
        raise UnsupportedSql(
            f"{uses[0]}: texts are not released from a table with a column of a "
            "nondeterministic (case- or accent-insensitive) collation (equal texts print "
            "differently, and which one is printed depends on the rows)",
            hint="give its text columns a deterministic collation "
            '(ALTER TABLE ... ALTER COLUMN ... TYPE text COLLATE "default")',
        )
    if declared is not None:
        key_texts.check_declared(declared, key_types[:n], names)
    else:
        key_texts.check_selectable(key_types[:n], names)
