"""The SQL a planned private statement sends upstream, written once for the statement and for
``EXPLAIN VERBOSE`` (its "Rewritten SQL": newcomer22 #29, EXPLAIN showed SQL written by another
function, without the key types, so not what ran), and parsed before an ``auto`` statement is
charged (:func:`preflight`, :mod:`dpsql.execute.own_sql`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dpsql.execute.own_sql import own_failure, parse_failure

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext
    from dpsql.execute.prepared import PrivateQuery
    from dpsql.sql.analysis import Analysis
    from dpsql.sql.grouping_sets import SetsPlan
    from dpsql.sql.plan import Plan

log = logging.getLogger(__name__)


def statement_texts(
    engine: EngineContext, prepared: PrivateQuery, plan: Plan | SetsPlan, *, recheck: bool = True
) -> tuple[list[str], Analysis]:
    """The SQL texts a planned private statement runs on the private rows (salt marker in place:
    :func:`dpsql.execute.private_sql.salted` puts a fresh salt there when it runs), and the
    analysis they were written from: one text, or one per grouping set. The one function both
    the statement (:func:`dpsql.execute.private.measure`) and ``EXPLAIN VERBOSE`` (its
    "Rewritten SQL", :func:`shown`) read, so EXPLAIN shows what runs. ``recheck``: the
    catalog's proofs read again (:meth:`dpsql.engine.Engine.checked_sql`), as just before the
    statement runs."""
    from dpsql.execute.grouping_sets import set_texts
    from dpsql.sql.grouping_sets import SetsPlan

    if isinstance(plan, SetsPlan):
        return set_texts(engine, prepared, plan), plan.analysis
    if not recheck:
        return [engine.typed_sql(prepared, plan.analysis)], plan.analysis
    text, a = engine.checked_sql(prepared, plan.analysis)
    return [text], a


def shown(texts: list[str]) -> str:
    """:func:`statement_texts` as ``EXPLAIN VERBOSE`` shows them: each text as it is sent, the
    salt as ``'<salt>'`` (a fresh one each time it runs), one grouping set's per line."""
    from dpsql.execute.private_sql import SALT_MARKER

    out = [t.replace(f"'{SALT_MARKER}'", "'<salt>'") for t in texts]
    if len(out) == 1:
        return out[0]
    return "\n".join(f"-- grouping set {i + 1}\n{t}" for i, t in enumerate(out))


def preflight(engine: EngineContext, prepared: PrivateQuery, plan: Plan | SetsPlan) -> None:
    """Before an ``auto`` statement reserves its budget and reads rows to choose its bounds:
    its answer's SQL, written with the default bounds in place of those to be chosen
    (``plan``), sent as a Parse message (:func:`parse_failure`). SQL dpsql writes wrongly for
    any bounds (an enum key hashed as text, a column whose upstream type is not the policy's) is
    refused here, XX000, before anything is charged; reading it needs the statement, the policy
    and the catalog only."""
    texts, _ = statement_texts(engine, prepared, plan, recheck=False)  # (read again later)
    for text in texts:
        failure = parse_failure(engine.backend, text)
        if failure is not None:
            log.error(
                "dpsql's own SQL for statement %s was refused by PostgreSQL at Parse before "
                "any charge (SQLSTATE %s: %s); the SQL: %s",
                prepared.fingerprint,
                failure.sqlstate,
                failure.message,
                text,
            )
            raise own_failure(failure, prepared.fingerprint, charged="Nothing was charged")
