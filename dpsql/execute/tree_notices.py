"""The notices of a statement of several DP leaves: each leaf's in its own name (its ``auto``
bounds when chosen now, its accuracy summary, a free repeat's), and what their intervals cover
(the leaves' released values, not the output PostgreSQL computes from them).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from dpsql.execute import privacy_params
from dpsql.execute.auto_bounds_text import notice
from dpsql.execute.bias import added_columns
from dpsql.execute.notices import interval_notices
from dpsql.execute.tree_leaves import LeafRun
from dpsql.session import SessionContext
from dpsql.sql.tree import Split

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext


def leaf_notices(
    sp: Split,
    run: LeafRun,
    measured: set[int],
    stored: bool,
    session: SessionContext,
    engine: EngineContext,
) -> tuple[str, ...]:
    """Each leaf's notices in its own name (its ``auto`` bounds when chosen now, its accuracy
    summary), and what they cover: the leaves' released values, not the statement's output
    that PostgreSQL computes from them."""
    conf = privacy_params.confidence(engine.policy, session)
    out: list[str] = []
    for i, rel in enumerate(run.releases):
        name = sp.labels[i] if i < len(sp.labels) else f"leaf {i}"
        b = run.budgets[i]
        lines: list[str] = []
        used = run.bounds[i]
        if b.auto and i in measured and used is not None:
            unit = run.plans[i].analysis.private.privacy_unit
            whose = "this part's" if len(run.releases) > 1 else "this statement's"
            adds = added_columns(run.plans[i])
            text = notice(used, b.share.epsilon, stored, unit, whose, run.plans[i].analysis, adds)
            lines += [text] if text else []
        if rel is not None:
            lines += list(rel.notes)
        if run.again[i] and i in measured:  # (as a flat statement says it)
            from dpsql.execute.private import MEASURED_AGAIN

            lines.append(MEASURED_AGAIN)
        repeat = run.repeats[i]
        if repeat is not None and i not in measured:
            lines.append(dataclasses.replace(repeat, auto=b.auto).notice())
        plan = run.plans[i]
        level = rel.confidence if rel is not None and rel.confidence is not None else conf
        notes = rel.notes if rel is not None else ()
        lines += list(interval_notices(plan.analysis, plan, level, notes))
        out += [f"{name}: {line}" for line in lines]
    if out and session.show_intervals:
        out.append(
            "these intervals are of each aggregate's released values per group, at the level "
            "each states; the statement's own intervals are its <column>_low/_high columns "
            "(below: what each holds, or why it is NULL)"
        )
    elif out:
        out.append(
            "these intervals are of each aggregate's released values per group (as that "
            "aggregate alone would return them); the statement's output is computed from them "
            "in PostgreSQL and carries no interval of its own: a SUM of k released values "
            "lies within the SUM of their ends with probability at least 1 - k x "
            f"{1 - conf:.2g} (union bound); SET dpsql.show_intervals = on returns the "
            "statement's own intervals as columns where one can be computed"
        )
    return tuple(out)
