"""The event-loop fast path: public and catalog statements run on the server's async upstream
pool (:mod:`dpsql.wire.upstream`), with no hop to a worker thread.

A public statement with parameters runs as PostgreSQL's own prepared statement with the values
passed as parameters (:func:`~dpsql.wire.params.upstream_param` types each one as the literal the
engine would inline for it), so a Bind/Execute loop neither renders SQL nor makes PostgreSQL parse
it again. This is equivalent to the engine's inlined literals because a public statement's checks
ran at prepare time, on the tree with its placeholders (:meth:`dpsql.engine.Engine.
parameterized_sql`). Catalog statements with parameters are checked with their values bound, so
they keep the engine's text (memoized per values, or computed in a worker thread).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ParamSpec, Protocol, TypeVar

from dpsql.errors import UpstreamError
from dpsql.result import Result
from dpsql.session import SessionContext
from dpsql.sql.prescan import kept_text
from dpsql.upstream.zone import session_zone
from dpsql.wire.params import upstream_params
from dpsql.wire.requests import uniform
from dpsql.wire.upstream import AsyncCancel, AsyncUpstream, raw_result

if TYPE_CHECKING:
    from dpsql.execute.prepared import Prepared
    from dpsql.wire.engine_api import UpstreamEngine

_LITERAL_ONLY_MAX = 1024
P = ParamSpec("P")
T = TypeVar("T")


class Caller(Protocol):
    """What the fast path needs of the session that runs it."""

    ctx: SessionContext

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T: ...


async def run_fast(
    session: Caller,
    engine: UpstreamEngine,
    prepared: Prepared,
    params: Sequence[object],
    upstream: AsyncUpstream,
    formats: Sequence[int] | None,
    token: AsyncCancel,
) -> Result:
    """Run a public or catalog statement on the event loop. When the client wants every column
    in one format, PostgreSQL's bytes in that format are passed through as they are."""
    fmt = uniform(formats)
    zone = session_zone(session.ctx.settings)
    rows = None
    sql = _parameterized(engine, prepared, session, params)
    if sql is not None:
        values, types = upstream_params(params)
        key = (sql, types)
        if key not in upstream.literal_only:
            try:
                rows = await upstream.run(sql, values, types, cancel=token, fmt=fmt, zone=zone)
            except UpstreamError as e:
                if not e.sqlstate.startswith("42"):
                    raise
                # PostgreSQL could not type a parameter as it types the literal (e.g. `$1 IS
                # NULL`): the literal form is the reference, use it for these types from now on.
                if len(upstream.literal_only) >= _LITERAL_ONLY_MAX:
                    upstream.literal_only.clear()
                if kept_text(sql):
                    upstream.literal_only.add(key)
    if rows is None:
        text = engine.cached_sql(prepared, session.ctx, params)
        if text is None:
            text = await session.call(engine.runnable_sql, prepared, session.ctx, tuple(params))
        rows = await upstream.run(text, cancel=token, fmt=fmt, zone=zone)
    if fmt is None:
        return Result(rows.columns, rows.rows, rows.status)
    return raw_result(rows.columns, rows.rows, rows.status, fmt)


def _parameterized(
    engine: UpstreamEngine, prepared: Prepared, session: Caller, params: Sequence[object]
) -> str | None:
    if not params or len(params) != prepared.param_count:
        return None  # a wrong count is refused by the engine's path, with its message
    return engine.parameterized_sql(prepared, session.ctx)
