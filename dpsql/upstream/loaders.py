"""Result values Python's types can't hold, read as PostgreSQL's text instead of failing.

psycopg reads a ``date`` into :class:`datetime.date`, which stops at 9999 and has no infinity:
``'infinity'``, ``'20000-01-01'`` or ``'0044-03-15 BC'`` fail with ``DataError: date too large``
(and the same for timestamps, ``time '24:00:00'``, intervals past ``timedelta``'s 999,999,999
days). A private statement reads its answer back from PostgreSQL after it is charged
(:mod:`dpsql.execute.finish`: the released keys, cast back to their type): a released key of
``infinity`` made every such answer, and each free repeat, fail after the charge. The loaders
here try psycopg's own first and keep any value it refuses as :class:`PgText`
(PostgreSQL's text, in the output settings dpsql pins), which the wire sends as PostgreSQL
would; intervals are always kept as PostgreSQL's text (:class:`IntervalText`).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import abc
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import Loader
from psycopg.pq import Format


class PgText(str):
    """A value PostgreSQL wrote that Python's types can't hold, kept as PostgreSQL's own text
    (in the output settings dpsql pins: :data:`dpsql.upstream.settings.OUTPUT_SETTINGS`):
    ``infinity`` and ``-infinity`` dates and timestamps, dates after 9999 or before 1 AD
    (``20000-01-01``, ``0044-03-15 BC``), ``24:00:00``, intervals beyond ``timedelta``'s range
    (:func:`register_lossless`). The wire sends it to clients as PostgreSQL sends it, in
    text or binary (:mod:`dpsql.wire.pg_binary`), so an answer whose released key is
    ``infinity`` is answered, and read by each client as that client reads PostgreSQL's.

    >>> v = PgText("infinity")
    >>> (v, isinstance(v, str))
    ('infinity', True)
    """

    __slots__ = ()


LOSSLESS_OIDS = (1082, 1114, 1184, 1083, 1266, 1186)
"""date, timestamp, timestamptz, time, timetz, interval: the text loaders wrapped here."""


class IntervalText(Loader):
    """An interval as PostgreSQL's text, always: :class:`datetime.timedelta` has no months
    (psycopg reads ``1 mon`` as 30 days, ``7305 years`` as 2,666,325 days, and the wire then
    sent ``2666325 days 0:00:00``) and stops at 999,999,999 days."""

    format = Format.TEXT

    def load(self, data: Buffer) -> Any:
        return PgText(bytes(data).decode("utf-8"))


def _lossless(base: type[abc.Loader]) -> type[Loader]:
    """A text loader that reads as ``base`` does, and keeps what ``base`` refuses as
    :class:`PgText`."""

    class Lossless(Loader):
        format = Format.TEXT

        def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
            super().__init__(oid, context)
            self._base = base(oid, context)

        def load(self, data: Buffer) -> Any:
            try:
                return self._base.load(data)
            except (psycopg.DataError, ValueError, OverflowError):
                return PgText(bytes(data).decode("utf-8"))

    Lossless.__name__ = Lossless.__qualname__ = f"Lossless{base.__name__}"
    return Lossless


def register_lossless(context: AdaptContext) -> None:
    """Register the lossless loaders on ``context`` (a connection: its adapters only)."""
    adapters = context.adapters
    adapters.register_loader(1186, IntervalText)
    for oid in LOSSLESS_OIDS:
        base = adapters.get_loader(oid, Format.TEXT)
        if oid == 1186:
            continue
        if base is not None and not base.__name__.startswith("Lossless"):
            adapters.register_loader(oid, _lossless(base))
