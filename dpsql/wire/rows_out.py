"""How a result's rows go out: DataRows until the outbox should be flushed (a slow client only
slows its own session), in the formats the client asked for or as PostgreSQL's own bytes (the
fast path's pass-through), and a ``COPY ... TO STDOUT``'s rows as CopyData. Used by the query
protocol (:mod:`dpsql.wire.protocol`) and its cursors (:mod:`dpsql.wire.cursor_run`); no state of
their own: the caller keeps where a portal's rows stand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dpsql.errors import InternalError
from dpsql.result import Result, ResultColumn
from dpsql.wire.copy_out import COPY_DONE, CopyStatement, copy_data, copy_lines, copy_out_response
from dpsql.wire.encode import Encoder, command_complete, encode_row, row_encoders
from dpsql.wire.messages.backend import data_row, raw_data_row
from dpsql.wire.requests import Flush, Outbox, Steps, uniform
from dpsql.wire.state import Outcome

_FLUSH = Flush()


def shape(res: Result | Outcome) -> tuple[Sequence[ResultColumn], Sequence[Any], str]:
    """A result's columns, rows and command tag, whoever answered it."""
    if isinstance(res, Outcome):
        return res.columns, res.rows, res.tag
    return res.columns, res.rows, res.command_tag


def encoders(
    columns: Sequence[ResultColumn], formats: tuple[int, ...], res: Result | Outcome
) -> list[Encoder] | None:
    """How to encode a result's rows; None when they hold PostgreSQL's bytes already, in
    the format the client asked for (the fast path's pass-through), sent as they are."""
    raw = getattr(res, "raw_format", None)
    if raw is None:
        return row_encoders(columns, formats)
    if uniform(formats) != raw:
        raise InternalError("rows fetched in one format were asked for in another")
    return None


def send_rows(out: Outbox, rows: Sequence[Any], encs: list[Encoder] | None) -> Steps:
    """DataRows of ``rows``, a Flush asked for whenever the outbox should be flushed (a slow
    client only slows its own session)."""
    i, n = 0, len(rows)
    while i < n:
        i = _send_some(out, rows, i, n, encs)
        if i < n:
            yield _FLUSH


def _send_some(out: Outbox, rows: Sequence[Any], i: int, n: int, encs: list[Encoder] | None) -> int:
    """DataRows from ``rows[i]`` on, until the outbox should be flushed: the index of the next
    row to send."""
    if encs is None:
        while i < n:
            out.send(raw_data_row(rows[i]))
            i += 1
            if out.should_flush:
                return i
        return n
    while i < n:
        out.send(data_row(rows[i], encs))
        i += 1
        if out.should_flush:
            return i
    return n


def copy_out(out: Outbox, copy: CopyStatement, res: Result | Outcome) -> Steps:
    """The answer ``res`` of a ``COPY ... TO STDOUT`` as PostgreSQL sends a COPY's data:
    CopyOutResponse, a CopyData per line (text or CSV, :mod:`dpsql.wire.copy_out`),
    CopyDone, ``COPY n``."""
    columns, rows, _ = shape(res)
    encs = encoders(columns, (), res)
    texts = rows if encs is None else [encode_row(r, encs) for r in rows]
    out.send(copy_out_response(len(columns)))
    for line in copy_lines(copy, [c.name for c in columns], texts):
        out.send(copy_data(line))
        if out.should_flush:
            yield _FLUSH
    out.send(COPY_DONE)
    out.send(command_complete(f"COPY {len(rows)}"))
