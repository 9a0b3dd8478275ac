"""The settings a session keeps, and how SET reads their values, as PostgreSQL does.

:data:`DEFAULTS` (the settings clients read, with PostgreSQL's spelling), :data:`REPORTED` (sent as
ParameterStatus), :data:`READ_ONLY`; :func:`check_setting` reads a SET value (client_encoding,
DateStyle, the time settings, isolation levels, client_min_messages) with PostgreSQL's words for a
bad one; :func:`read_fraction` / :func:`read_delta` / :func:`read_bool` read ``dpsql.*`` values;
:func:`notice_wanted` applies ``client_min_messages``. Pure functions: the session's state that
uses them is :mod:`dpsql.wire.state`.
"""

from __future__ import annotations

import re
from fractions import Fraction

from dpsql.errors import InvalidParameter, UnsupportedSql
from dpsql.execute.privacy_params import MAX_DELTA

# Settings clients read; names are case-insensitive, reported with PostgreSQL's spelling.
DEFAULTS: dict[str, str] = {
    "server_version": "16.0",
    "server_version_num": "160000",
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "TimeZone": "UTC",
    "integer_datetimes": "on",
    "standard_conforming_strings": "on",
    "application_name": "",
    "is_superuser": "off",
    "session_authorization": "",
    "default_transaction_read_only": "on",
    "transaction_read_only": "on",
    "in_hot_standby": "off",
    "search_path": '"$user", public',
    "transaction_isolation": "read committed",
    "default_transaction_isolation": "read committed",
    "max_identifier_length": "63",
    "extra_float_digits": "1",
    "statement_timeout": "0",
    "lock_timeout": "0",
    "idle_in_transaction_session_timeout": "0",
    "lc_messages": "C",
    "lc_monetary": "C",
    "lc_numeric": "C",
    "lc_time": "C",
    "bytea_output": "hex",
    "client_min_messages": "notice",
    "row_security": "on",
    "scram_iterations": "4096",
}
REPORTED = (
    "server_version", "server_encoding", "client_encoding", "DateStyle", "IntervalStyle",
    "TimeZone", "integer_datetimes", "standard_conforming_strings", "application_name",
    "is_superuser", "session_authorization", "default_transaction_read_only", "in_hot_standby",
    "scram_iterations",
)  # fmt: skip
CANON = {k.lower(): k for k in DEFAULTS}
READ_ONLY = frozenset(
    {"server_version", "server_version_num", "server_encoding", "integer_datetimes",
     "is_superuser", "session_authorization", "in_hot_standby", "max_identifier_length",
     "transaction_read_only", "lc_collate", "lc_ctype", "scram_iterations"}
)  # fmt: skip
_TRUE = frozenset({"on", "true", "yes", "1", "t"})
_FALSE = frozenset({"off", "false", "no", "0", "f"})


# client_min_messages' levels, lowest first (PostgreSQL's order; LOG sits below NOTICE here)
MESSAGE_LEVELS = ("debug5", "debug4", "debug3", "debug2", "debug1", "log", "notice", "warning",
                  "error")  # fmt: skip
_LEVEL = {name: i for i, name in enumerate(MESSAGE_LEVELS)} | {"debug": 3, "info": 6}


def notice_wanted(severity: str, min_messages: str) -> bool:
    """Whether a notice of ``severity`` reaches a client whose ``client_min_messages`` is
    ``min_messages``, as PostgreSQL decides: INFO always, others from that level up.

    >>> [notice_wanted(s, "warning") for s in ("NOTICE", "WARNING", "INFO")]
    [False, True, True]
    >>> notice_wanted("NOTICE", "notice"), notice_wanted("WARNING", "error")
    (True, False)
    """
    sev = severity.lower()
    if sev == "info":
        return True
    return _LEVEL.get(sev, _LEVEL["notice"]) >= _LEVEL.get(min_messages.lower(), _LEVEL["notice"])


def canon(name: str) -> str:
    return CANON.get(name.lower(), name.lower())


def check_setting(key: str, value: str) -> str:
    v = value.strip()
    if key == "client_encoding":
        if v.lower().replace("-", "").replace("_", "") not in ("utf8", "unicode"):
            raise InvalidParameter(f"client_encoding {value!r} is not supported",
                                   hint="dpsql speaks UTF8 only")  # fmt: skip
        return "UTF8"
    if key == "DateStyle":
        parts = [p.strip().upper() for p in v.split(",")]
        if "ISO" not in parts and not all(p in ("MDY", "DMY", "YMD") for p in parts):
            raise UnsupportedSql(f"DateStyle {value!r} is not supported",
                                 hint="use ISO (dpsql sends dates in ISO format)")  # fmt: skip
        order = next((p for p in parts if p in ("MDY", "DMY", "YMD")), "MDY")
        if order != "MDY":
            # dpsql reads the statement's date constants itself (key domains, date bounds)
            # and upstream in MDY: accepted, '01/12/2025' was 12 January, not 1 December
            # (an 11x wrong count, silently: newcomer22 #33)
            raise UnsupportedSql(
                f"DateStyle {value!r} is not supported: dpsql reads dates like 01/12/2025 in "
                "month/day/year order (January 12)",
                hint="write dates as 'YYYY-MM-DD' (e.g. '2025-12-01'), which every DateStyle "
                "reads alike; keep DateStyle ISO, MDY",
            )
        return f"ISO, {order}"
    if key == "search_path":
        return search_path(value)
    if key == "standard_conforming_strings":
        return standard_strings(value)
    if key == "IntervalStyle" and v.lower() != "postgres":
        raise UnsupportedSql(f"IntervalStyle {value!r} is not supported", hint="use postgres")
    if key in _TIME_SETTINGS:
        return _show_ms(_ms(key, v))
    if key == "default_transaction_isolation":
        return isolation_level(key, v)
    if key == "client_min_messages":
        level = v.lower()
        if level not in _LEVEL:
            raise InvalidParameter(
                f'invalid value for parameter "client_min_messages": "{value}"',
                hint="Available values: " + ", ".join(MESSAGE_LEVELS) + ".",
            )
        return "debug2" if level == "debug" else level
    return value


def search_path(value: str) -> str:
    """A ``search_path`` dpsql honours: one whose first schema, past ``"$user"`` and
    ``pg_catalog``, is ``public`` (or that names none). dpsql reads a table named without its
    schema as ``public.<name>`` (dpsql.sql.tables) and pins the upstream's search path to it; with
    ``SET search_path = sales`` PostgreSQL would read ``SELECT COUNT(*) FROM t`` as ``sales.t``
    while dpsql answered ``public.t``: another table's number, silently (DBeaver sets the schema a
    user picks this way). ``value`` as :func:`dpsql.wire.statements` joins a SET's list (quoted
    names unquoted, others lower case) or a startup parameter's text (``Public`` unquoted there:
    refused, as ``"Public"`` is).

    >>> search_path('"$user", public'), search_path("pg_catalog, public, sales")
    ('"$user", public', 'pg_catalog, public, sales')
    >>> search_path("sales, public")
    Traceback (most recent call last):
    ...
    dpsql.errors.FeatureNotSupported: search_path "sales, public" is not supported: dpsql reads a table named without a schema in schema public
    """
    for name in value.split(","):
        bare = name.strip()
        if len(bare) > 1 and bare[0] == bare[-1] == '"':  # a startup parameter's quoted name
            bare = bare[1:-1].replace('""', '"')
        if bare in ("", "$user", "pg_catalog"):
            continue
        if bare == "public":
            return value
        raise UnsupportedSql(
            f'search_path "{value.strip()}" is not supported: dpsql reads a table named without '
            "a schema in schema public",
            detail=f'PostgreSQL would look for such a table in schema "{bare}" first; dpsql '
            "would answer from public, another table",
            hint=f"write the schema in the statement (SELECT ... FROM {bare}.table_name), and "
            'keep search_path = public (or "$user", public)',
        )
    return value


def standard_strings(value: str) -> str:
    r"""``standard_conforming_strings``: on only. dpsql reads a backslash in ``'...'`` as an
    ordinary character, and so does the upstream (pinned on: :mod:`dpsql.upstream.settings`);
    a session told off would write ``'n\\s'`` for n\s (a client escaping literals for the
    setting it was told) or mean ``ns`` by ``'n\s'``, and dpsql would compare with another
    string, silently.

    >>> standard_strings("1")
    'on'
    """
    if read_bool("standard_conforming_strings", value.strip()):
        return "on"
    raise UnsupportedSql(
        "standard_conforming_strings = off is not supported: dpsql reads a backslash in "
        "'...' as an ordinary character",
        hint="keep standard_conforming_strings on, and write backslash escapes as E'...' "
        "(E'it\\'s' or 'it''s')",
    )


_ISOLATIONS = ("serializable", "repeatable read", "read committed", "read uncommitted")


def isolation_level(key: str, value: str) -> str:
    """An isolation level dpsql keeps: read committed (or read uncommitted, which PostgreSQL
    runs as read committed). Each statement runs upstream in a snapshot of its own, on whichever
    pooled connection is free, so a snapshot shared by a block's statements (repeatable read,
    serializable) is refused, not silently given as read committed.

    Raises:
        InvalidParameter: 22023, a level PostgreSQL doesn't know.
        UnsupportedSql: 0A000, repeatable read and serializable.
    """
    level = " ".join(value.lower().split())
    if level not in _ISOLATIONS:
        raise InvalidParameter(f'invalid value for parameter "{key}": "{value}"',
                               hint="Available values: " + ", ".join(_ISOLATIONS) + ".")  # fmt: skip
    if level in ("serializable", "repeatable read"):
        raise UnsupportedSql(
            f"transaction isolation level {level} is not supported by dpsql",
            detail="dpsql runs each statement in a snapshot of its own (read committed): the "
            "statements of a transaction block do not share one, and each private answer is a "
            "release of its own",
            hint="use BEGIN (read committed, the default); to see rows as of one moment, ask "
            "for them in one statement",
        )
    return level


_TIME_SETTINGS = frozenset(
    {"statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout"}
)
_TIME = re.compile(r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([a-z]*)\s*")
_UNITS_MS = {"": 1.0, "us": 0.001, "ms": 1.0, "s": 1000.0, "min": 60_000.0, "h": 3_600_000.0,
             "d": 86_400_000.0}  # fmt: skip
_INT_MAX = 2**31 - 1


def _ms(key: str, value: str) -> int:
    """A time setting's value in milliseconds, read as PostgreSQL reads it (``5s``, ``5000``,
    ``1.5 min``; no unit: ms), with its words for a bad one (22023)."""
    m = _TIME.fullmatch(value)
    if m is None or m.group(2) not in _UNITS_MS:
        raise InvalidParameter(
            f'invalid value for parameter "{key}": "{value}"',
            hint='Valid units for this parameter are "us", "ms", "s", "min", "h", and "d".'
            if m is not None
            else None,
        )
    ms = round(float(m.group(1)) * _UNITS_MS[m.group(2)])
    if not 0 <= ms <= _INT_MAX:
        raise InvalidParameter(
            f'{ms} ms is outside the valid range for parameter "{key}" (0 .. {_INT_MAX})'
        )
    return ms


def _show_ms(ms: int) -> str:
    """As SHOW prints a time setting: in the largest unit that holds it exactly (``5s``,
    ``1min``, ``1500ms``, ``0``)."""
    if ms == 0:
        return "0"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def timeout_ms(settings: dict[str, str]) -> int:
    """The session's ``statement_timeout`` in milliseconds (0: none), as SHOW prints it."""
    return _ms("statement_timeout", settings.get("statement_timeout", "0"))


def read_bool(name: str, value: str) -> bool:
    v = value.lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise InvalidParameter(f'parameter "{name}" requires a Boolean value', hint="use on or off")


def read_delta(name: str, value: str) -> Fraction:
    """``dpsql.delta``'s value, in [0, MAX_DELTA] (:mod:`dpsql.execute.privacy_params`), with
    PostgreSQL's words for a setting out of its range: ``0.5 is outside the valid range for
    parameter "dpsql.delta" (0 .. 0.01)`` (22023)."""
    try:
        f = Fraction(value.strip())
    except (ValueError, ZeroDivisionError):
        f = read_fraction(name, value, lo=0)  # raises PostgreSQL's "invalid value for parameter"
    if not 0 <= f <= MAX_DELTA:
        raise InvalidParameter(
            f'{float(f):g} is outside the valid range for parameter "{name}" '
            f"(0 .. {float(MAX_DELTA):g})",
            hint="use a delta far below 1/(number of people), e.g. 1e-6",
        )
    return f


def read_fraction(
    name: str, value: str, lo: int | None, hi: int | None = None, lo_open: bool = False
) -> Fraction:
    try:
        f = Fraction(value.strip())
    except (ValueError, ZeroDivisionError):
        raise InvalidParameter(f'invalid value for parameter "{name}": "{value}"',
                               hint="give a decimal number such as 0.5") from None  # fmt: skip
    if lo is None:
        return f
    if f < lo or (lo_open and f == lo) or (hi is not None and f >= hi):
        rng = f"{'>' if lo_open else '>='} {lo}" + (f" and < {hi}" if hi is not None else "")
        raise InvalidParameter(f'{value} is outside the valid range for parameter "{name}"',
                               hint=f"give a value {rng}")  # fmt: skip
    return f
