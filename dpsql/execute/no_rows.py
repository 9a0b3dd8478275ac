"""The answer of a statement without GROUP BY whose WHERE clause no row can pass, whatever the
data (:func:`dpsql.sql.group_domain.no_row_left`: ``diagnosis = 'Flu'`` when the policy's keys
of diagnosis are lower-case): the aggregates of no rows, as PostgreSQL gives them (COUNT and
COUNT(DISTINCT) 0, with the interval [0, 0]; SUM, AVG, MIN, MAX, the quantiles and the others
NULL), through the same post-processing as a released answer (so ``COUNT(*) * 2``, ``COALESCE``
and ``HAVING`` read them as PostgreSQL would), with the notice saying why. Nothing is read or
charged: the answer is a function of the statement and the policy (newcomer22 #9)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.execute.finish import finish
from dpsql.execute.noise import Release
from dpsql.result import Result
from dpsql.session import SessionContext
from dpsql.sql.intervals import derived_outputs
from dpsql.sql.withheld import unheld

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext
    from dpsql.execute.prepared import PrivateQuery
    from dpsql.sql.analysis import Analysis

_ZERO = ("count", "count_distinct")  # the aggregates that are 0, not NULL, over no rows


def answer(
    engine: EngineContext,
    prepared: PrivateQuery,
    a: Analysis,
    session: SessionContext,
    notice: str,
) -> Result:
    """One row: every aggregate of ``a`` over no rows, exactly (no noise: nothing measured)."""
    zero = [s.func in _ZERO for s in a.statistics]
    # these NULLs are SQL's "no rows", not withheld values: COALESCE reads them as PostgreSQL does
    outer = unheld(a.outer.copy())
    assert isinstance(outer, exp.Select)  # (its root is the SELECT: never a wrapper)
    a = dataclasses.replace(a, outer=outer)
    rel = Release(
        (),
        [[]],
        [[0 if z else None for z in zero]],
        [[(0.0, 0.0) if z else None for z in zero]],
        [[None] * len(derived_outputs(a))],
        notes=(notice,),
        half_widths=[[0.0 if z else None for z in zero]],
    )
    return finish(engine, prepared, a, rel, session)
