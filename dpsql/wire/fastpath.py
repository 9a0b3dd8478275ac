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

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dpsql.errors import InternalError, UpstreamError
from dpsql.result import Result
from dpsql.wire.params import upstream_params
from dpsql.wire.upstream import AsyncCancel, AsyncUpstream, raw_result

if TYPE_CHECKING:
    from dpsql.wire.session import Session, Statement

FAST_KINDS = frozenset({"public", "catalog"})
_LITERAL_ONLY_MAX = 1024


async def run_fast(
    session: Session,
    stmt: Statement,
    params: Sequence[Any],
    upstream: AsyncUpstream,
    formats: Sequence[int] | None,
    token: AsyncCancel,
) -> Result:
    """Run a public or catalog statement on the event loop. When the client wants every column
    in one format, PostgreSQL's bytes in that format are passed through as they are."""
    engine: Any = session.engine
    prepared = stmt.prepared
    fmt = uniform(formats)
    rows = None
    sql = _parameterized(engine, prepared, session, params)
    if sql is not None:
        values, types = upstream_params(params)
        key = (sql, types)
        if key not in upstream.literal_only:
            try:
                rows = await upstream.run(sql, values, types, cancel=token, fmt=fmt)
            except UpstreamError as e:
                if not e.sqlstate.startswith("42"):
                    raise
                # PostgreSQL could not type a parameter as it types the literal (e.g. `$1 IS
                # NULL`): the literal form is the reference, use it for these types from now on.
                if len(upstream.literal_only) >= _LITERAL_ONLY_MAX:
                    upstream.literal_only.clear()
                upstream.literal_only.add(key)
    if rows is None:
        text = engine.cached_sql(prepared, session.ctx, params)
        if text is None:
            text = await session.call(engine.runnable_sql, prepared, session.ctx, tuple(params))
        rows = await upstream.run(text, cancel=token, fmt=fmt)
    if fmt is None:
        return Result(rows.columns, rows.rows, rows.status)
    return raw_result(rows.columns, rows.rows, rows.status, fmt)


def _parameterized(
    engine: Any, prepared: Any, session: Session, params: Sequence[Any]
) -> str | None:
    if not params or len(params) != prepared.param_count:
        return None  # a wrong count is refused by the engine's path, with its message
    get = getattr(engine, "parameterized_sql", None)
    return None if get is None else get(prepared, session.ctx)  # type: ignore[no-any-return]


def uniform(formats: Sequence[int] | None) -> int | None:
    """The one result format of every column (none given: text), or None (mixed, or unknown)."""
    if formats is None:
        return None
    if not formats:
        return 0
    first = formats[0]
    if first not in (0, 1):
        return None
    return first if len(formats) == 1 or all(f == first for f in formats) else None


def as_is(v: bytes) -> bytes:
    return v


def raw_encoders(ncols: int, formats: Sequence[int], raw_format: int) -> list[Any]:
    """Encoders for rows of PostgreSQL's bytes in ``raw_format``, sent as they are."""
    if uniform(formats) != raw_format:
        raise InternalError("rows fetched in one format were asked for in another")
    return [as_is] * ncols
