"""Python values <-> PostgreSQL wire values, in text and binary, through psycopg's adapters.

Result columns are encoded by their declared type OID (not by the Python type, which can be
narrower: a count in an ``int8`` column must be sent as 8 bytes even when it is small), with a light
coercion first (a float in an integer column is rounded, a float in a ``numeric`` column becomes a
Decimal). Parameters are decoded with psycopg's loaders for their type OID.
"""

from __future__ import annotations

import datetime
import math
import re
import struct
from collections.abc import Callable, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any

from psycopg import adapters
from psycopg.adapt import PyFormat, Transformer
from psycopg.postgres import types as pg_types
from psycopg.pq import Format

from dpsql.errors import (
    InternalError,
    InvalidBinaryRepresentation,
    InvalidTextRepresentation,
    ProtocolViolation,
)
from dpsql.result import ResultColumn
from dpsql.upstream.loaders import LOSSLESS_OIDS, PgText
from dpsql.wire.pg_binary import special_binary

Encoder = Callable[[Any], bytes]

_INTEGER = frozenset({20, 21, 23, 26, 28, 29})
_FLOAT = frozenset({700, 701})
_NUMERIC = 1700
_BOOL = 16
_TEXTLIKE = frozenset({18, 19, 25, 142, 1042, 1043})  # xml (142) is sent as its text
_TRANSFORMER = Transformer()
_NUMERIC_INF = {"Infinity": bytes.fromhex("00000000d0000020"),
                "-Infinity": bytes.fromhex("00000000f0000020")}  # fmt: skip

# typlen for RowDescription's "data type size" field (-1 variable, -2 cstring).
_TYPE_SIZES = {16: 1, 18: 1, 19: 64, 20: 8, 21: 2, 23: 4, 26: 4, 700: 4, 701: 8, 1082: 4,
               1083: 8, 1114: 8, 1184: 8, 1186: 16, 2950: 16}  # fmt: skip


def type_size(oid: int) -> int:
    """The ``typlen`` of a built-in type, as RowDescription reports it (-1 if variable)."""
    return _TYPE_SIZES.get(oid, -1)


def _coerce(oid: int) -> Callable[[Any], Any]:
    if oid in _INTEGER:
        return lambda v: v if type(v) is int else int(round(v))
    if oid in _FLOAT:
        return float
    if oid == _NUMERIC:
        return lambda v: Decimal(repr(v)) if isinstance(v, float) else v
    if oid == _BOOL:
        return bool
    if oid in _TEXTLIKE:
        return lambda v: v if isinstance(v, str) else str(v)
    return lambda v: v


def float_text(v: Any) -> bytes:
    """A float4/float8 as PostgreSQL writes it (extra_float_digits >= 1, the default since 12):
    the shortest digits that read back the same, fixed notation for decimal exponents -4 to 14
    and no trailing ``.0`` (``1801000``, not Python's ``1801000.0``), else ``1.5e+15`` /
    ``1e-05``; ``NaN``, ``Infinity``, ``-Infinity``, ``-0``.

    >>> [float_text(x) for x in (1801000.0, 2.5, 1e15, 123456789012345.0, 0.0001, 1e-05, -0.0)]
    [b'1801000', b'2.5', b'1e+15', b'123456789012345', b'0.0001', b'1e-05', b'-0']
    """
    x = float(v)
    if x != x:
        return b"NaN"
    if x in (math.inf, -math.inf):
        return b"Infinity" if x > 0 else b"-Infinity"
    d = Decimal(repr(x))
    if d == 0:
        return b"-0" if math.copysign(1.0, x) < 0 else b"0"
    e = d.adjusted()
    if -4 <= e < 15:
        return format(d.normalize(), "f").encode("ascii")
    sign, digits, _ = d.normalize().as_tuple()
    text = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
    exp = f"{'-' if e < 0 else '+'}{abs(e):02d}"
    return f"{'-' if sign else ''}{text}e{exp}".encode("ascii")


def _fallback_text(v: Any) -> bytes:
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, bytes | bytearray | memoryview):
        return b"\\x" + bytes(v).hex().encode("ascii")
    if isinstance(v, list | tuple):
        return bytes(_TRANSFORMER.get_dumper(list(v), PyFormat.TEXT).dump(list(v)))  # type: ignore[arg-type]
    if isinstance(v, bool):
        return b"t" if v else b"f"
    return str(v).encode("utf-8")


def timestamp_text(v: Any) -> bytes:
    """A timestamp / timestamptz as PostgreSQL writes it (DateStyle ISO): fractional seconds
    without trailing zeros, the offset as ``+00`` (``+05:30`` when it has minutes), not Python's
    ``+00:00``.

    >>> import datetime as dt
    >>> timestamp_text(dt.datetime(2025, 1, 2, 3, 4, 5, 500000, tzinfo=dt.timezone.utc))
    b'2025-01-02 03:04:05.5+00'
    >>> timestamp_text(dt.datetime(2025, 1, 2, tzinfo=dt.timezone(-dt.timedelta(hours=3, minutes=30))))
    b'2025-01-02 00:00:00-03:30'
    """
    if not isinstance(v, datetime.datetime):
        return _fallback_text(v)
    out = (f"{v.year:04d}-{v.month:02d}-{v.day:02d} "
           f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}")  # fmt: skip
    if v.microsecond:
        out += f".{v.microsecond:06d}".rstrip("0")
    off = v.utcoffset()
    if off is not None:
        secs = int(off.total_seconds())
        sign, secs = ("-" if secs < 0 else "+"), abs(secs)
        out += f"{sign}{secs // 3600:02d}"
        if secs % 3600:
            out += f":{secs % 3600 // 60:02d}"
            if secs % 60:
                out += f":{secs % 60:02d}"
    return out.encode("ascii")


def _binary_array(oid: int) -> Encoder | None:
    info = pg_types.get(oid)
    if info is None or info.array_oid != oid:
        return None
    elem_oid = info.oid
    elem = encoder(elem_oid, 1)

    def enc(v: Any) -> bytes:
        items = list(v)
        if any(isinstance(x, list | tuple) for x in items):
            raise InternalError("multi-dimensional arrays are not supported in binary results")
        has_null = any(x is None for x in items)
        out = [struct.pack("!iiI", 1 if items else 0, int(has_null), elem_oid)]
        if items:
            out.append(struct.pack("!ii", len(items), 1))
        for x in items:
            if x is None:
                out.append(b"\xff\xff\xff\xff")
            else:
                b = elem(x)
                out.append(struct.pack("!i", len(b)) + b)
        return b"".join(out)

    return enc


@lru_cache(maxsize=512)
def encoder(oid: int, fmt: int) -> Encoder:
    """The encoder of a value of type ``oid`` in format 0 (text) or 1 (binary).

    A :class:`~dpsql.upstream.loaders.PgText` (a date, time or interval Python can't hold, kept as
    PostgreSQL's text) is sent as that text, or in binary as PostgreSQL's ``*_send`` writes it
    (:func:`dpsql.wire.pg_binary.special_binary`); in an array too.

    >>> encoder(20, 1)(5)
    b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x05'
    >>> encoder(20, 0)(4.6)
    b'5'
    >>> encoder(1082, 0)(PgText("infinity")), encoder(1082, 1)(PgText("infinity"))
    (b'infinity', b'\\x7f\\xff\\xff\\xff')
    >>> import datetime as dt
    >>> encoder(1182, 0)([dt.date(2025, 1, 2), PgText("infinity"), None])
    b'{2025-01-02,infinity,NULL}'
    """
    base = _encoder(oid, fmt)
    if oid == _NUMERIC and fmt:  # PostgreSQL's numeric_send writes ±Infinity with dscale 32
        return lambda v: _NUMERIC_INF.get(str(v)) or base(v) if isinstance(v, Decimal) else base(v)
    if oid in LOSSLESS_OIDS:
        if fmt:
            return lambda v: special_binary(oid, v) if isinstance(v, PgText) else base(v)
        return lambda v: v.encode("utf-8") if isinstance(v, PgText) else base(v)
    info = pg_types.get(oid)
    if not fmt and info is not None and info.array_oid == oid and info.oid in LOSSLESS_OIDS:
        elem = encoder(info.oid, 0)
        return lambda v: _array_text(v, elem) if _holds_text(v) else base(v)
    return base


def _holds_text(v: Any) -> bool:
    """Whether an array value holds a :class:`PgText` (at any depth)."""
    return isinstance(v, list | tuple) and any(isinstance(x, PgText) or _holds_text(x) for x in v)


def _array_text(v: Any, elem: Encoder) -> bytes:
    """An array in PostgreSQL's text form (``{a,"b c",NULL}``), its elements by ``elem``."""
    out = []
    for x in v:
        if x is None:
            out.append(b"NULL")
        elif isinstance(x, list | tuple):
            out.append(_array_text(x, elem))
        else:
            t = elem(x)
            if not t or t.upper() == b"NULL" or any(c in t for c in b'{},"\\ \t\n'):
                t = b'"' + t.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'
            out.append(t)
    return b"{" + b",".join(out) + b"}"


def _encoder(oid: int, fmt: int) -> Encoder:
    """:func:`encoder` for the values psycopg's dumpers write."""
    pq_fmt = Format.BINARY if fmt else Format.TEXT
    coerce = _coerce(oid)
    if oid == 17 and not fmt:
        return lambda v: b"\\x" + bytes(v).hex().encode("ascii")
    if oid in (1114, 1184) and not fmt:
        return timestamp_text
    if oid in _FLOAT and not fmt:
        return float_text
    arr = _binary_array(oid) if fmt else None
    if arr is not None:
        return arr
    try:
        info = pg_types.get(oid)
        is_array = info is not None and info.array_oid == oid
        dumper = adapters.get_dumper_by_oid(oid, pq_fmt)(list if is_array else object, None)
    except Exception:
        dumper = None
    if dumper is not None and not (fmt and oid in _TEXTLIKE and oid not in (19, 25, 1043)):
        dump = dumper.dump

        def enc(v: Any) -> bytes:
            try:
                out = dump(coerce(v))
                return b"" if out is None else bytes(out)
            except Exception as e:
                if fmt:  # a value psycopg can't write in binary: say so, never "internal error"
                    raise _unsendable(oid, type(e).__name__) from None
                return _fallback_text(v)

        return enc
    if not fmt:
        return _fallback_text
    if oid in _TEXTLIKE:
        return lambda v: str(v).encode("utf-8")

    def refuse(v: Any) -> bytes:
        raise _unsendable(oid)

    return refuse


def _unsendable(oid: int, why: str = "") -> InternalError:
    """A result value dpsql can't write in binary. A private answer is stored before its rows
    are sent (docs/budget.md): asked again with text results, it is answered at no cost."""
    name = pg_types.get(oid)
    return InternalError(
        f"values of type {name.name if name else f'oid {oid}'} cannot be sent in binary format"
        + (f" ({why})" if why else ""),
        hint="request text format for this column; a private answer was stored before its "
        "rows were sent, so asking again is free",
    )


def row_encoders(columns: Sequence[ResultColumn], formats: Sequence[int]) -> list[Encoder]:
    """One encoder per column for the result formats of a Bind (0, 1 or one code per column)."""
    return [encoder(c.type_oid, result_format(formats, i)) for i, c in enumerate(columns)]


def result_format(formats: Sequence[int], i: int) -> int:
    """The format of column ``i``: none given = text, one = all, else one per column."""
    if not formats:
        return 0
    if len(formats) == 1:
        return formats[0]
    return formats[i]


def encode_row(row: Sequence[Any], encoders: Sequence[Encoder]) -> tuple[bytes | None, ...]:
    return tuple(None if v is None else e(v) for v, e in zip(row, encoders, strict=True))


@lru_cache(maxsize=256)
def _loader(oid: int, fmt: int) -> Callable[[bytes], Any]:
    pq_fmt = Format.BINARY if fmt else Format.TEXT
    if oid == 0 and not fmt:
        return lambda b: bytes(b).decode("utf-8")
    if oid == _DATE_OID and not fmt:
        return _load_date_text
    return _TRANSFORMER.get_loader(oid, pq_fmt).load


_DATE_OID = 1082
_DATE_WITH_TIME = re.compile(
    rb"\s*(\d{4,}-\d{1,2}-\d{1,2})(?:[ T]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?"
    rb"\s*(?:Z|[+-]\d{1,2}(?::?\d{2}){0,2})?\s*"
)


def _load_date_text(data: bytes) -> Any:
    """A date parameter's text as PostgreSQL's ``date_in`` reads it: an ISO date, also followed
    by a time and a zone, which it drops. PgJDBC's ``setDate`` sends ``2025-01-01 +00`` and
    ``setTimestamp`` ``2025-06-01 00:00:00+00`` (type unspecified), node-postgres a ``Date`` as
    ``2025-06-01T00:00:00.000+00:00``: PostgreSQL takes each as that day, psycopg's date loader
    only the bare date. Anything else is the date loader's to accept or refuse."""
    load = _TRANSFORMER.get_loader(_DATE_OID, Format.TEXT).load
    m = _DATE_WITH_TIME.fullmatch(bytes(data))
    return load(m.group(1) if m else data)


def decode_param(data: bytes | None, oid: int, fmt: int, index: int) -> object:
    """Decode parameter ``$index`` (1-based) sent by the client.

    Raises:
        InvalidParameter: the bytes are not a valid value of the type (22P02 / 08P01 as PostgreSQL).
    """
    if data is None:
        return None
    if fmt and oid == 0:
        raise ProtocolViolation(
            f"parameter ${index} was sent in binary without a type",
            hint="declare the parameter type in Parse, or send it in text format",
        )
    size = _TYPE_SIZES.get(oid, -1)
    try:
        if fmt and size > 0 and oid != 19 and len(data) != size:
            raise ValueError(f"binary value of {len(data)} bytes, expected {size}")
        return _loader(oid, fmt)(data)
    except Exception:
        # PostgreSQL's own words (never the Python exception's name)
        if fmt:
            raise InvalidBinaryRepresentation(
                f"incorrect binary data format in bind parameter {index}",
                hint="check the parameter's type and format",
            ) from None
        info = pg_types.get(oid)
        name = info.regtype if info is not None else f"oid {oid}"
        text = bytes(data).decode("utf-8", errors="replace")
        raise InvalidTextRepresentation(
            f'invalid input syntax for type {name}: "{text}"',
            detail=f"in parameter ${index}",
            hint="check the parameter's type and format",
        ) from None


# ---- whole messages, encoded once ------------------------------------------------------------
def _encoded(msg: Any) -> bytes:
    return bytes(msg.encode())


@lru_cache(maxsize=1024)
def row_description(columns: tuple[ResultColumn, ...], formats: tuple[int, ...]) -> bytes:
    """The RowDescription of ``columns`` with result ``formats`` (cached: the same statement is
    described with the same formats on every execution)."""
    from dpsql.wire import messages as m

    return _encoded(
        m.RowDescription(
            tuple(
                m.FieldDescription(
                    c.name, c.type_oid, c.typmod, type_size(c.type_oid), result_format(formats, i)
                )
                for i, c in enumerate(columns)
            )
        )
    )


@lru_cache(maxsize=1024)
def command_complete(tag: str) -> bytes:
    """CommandComplete with ``tag`` (cached: a statement's tag repeats)."""
    from dpsql.wire import messages as m

    return _encoded(m.CommandComplete(tag))
