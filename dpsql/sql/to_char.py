"""PostgreSQL's ``to_char`` of a date, for the date patterns (``YYYY-MM``, ``FMMonth``,
``IYYY-"W"IW``, ``Dy``, ...): the keys :meth:`dpsql.sql.time_keys.TimeKeys._to_char` prints for
each day of a derived key's range, as PostgreSQL prints them (DateStyle ISO, English names)."""

from __future__ import annotations

import re
from datetime import date

from sqlglot import exp

from dpsql.sql.nodes import POSTGRES


def pg_format(node: exp.TimeToStr) -> str | None:
    """The format string of ``to_char`` as dpsql sends it upstream (sqlglot's PostgreSQL
    rendering of the parsed format)."""
    sql = node.sql(POSTGRES)
    m = re.fullmatch(r"TO_CHAR\(.*, '((?:[^']|'')*)'\)", sql, re.S)
    return m.group(1).replace("''", "'") if m else None


_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December"]  # fmt: skip
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
# to_char's date patterns, longest first (PostgreSQL matches the longest keyword)
_PATTERNS = ["MONTH", "Month", "month", "IYYY", "YYYY", "yyyy", "iyyy", "DAY", "Day", "day",
             "DDD", "ddd", "MON", "Mon", "mon", "YYY", "yyy", "DY", "Dy", "dy", "YY", "yy", "MM",
             "mm", "DD", "dd", "IW", "iw", "WW", "ww", "ID", "id", "D", "d", "Q", "q"]  # fmt: skip
_SEPARATORS = set(" -/.,:_")


def to_char_pattern(fmt: str) -> list[tuple[str, bool]] | None:
    """``fmt`` as (pattern or literal text, fill mode) parts; None for a pattern outside the
    date patterns above (a time of day, a suffix such as TH, an unknown letter)."""
    out: list[tuple[str, bool]] = []
    i = 0
    fill = False
    while i < len(fmt):
        if fmt.startswith("FM", i) or fmt.startswith("fm", i):
            fill = True
            i += 2
            continue
        for p in _PATTERNS:
            if fmt.startswith(p, i):
                if fmt.startswith(("TH", "th"), i + len(p)):
                    return None
                out.append(("%" + p, fill))
                i += len(p)
                fill = False
                break
        else:
            ch = fmt[i]
            if ch == '"':
                end = fmt.find('"', i + 1)
                if end < 0 or "\\" in fmt[i:end]:
                    return None
                out.append((fmt[i + 1 : end], False))
                i = end + 1
            elif ch in _SEPARATORS:
                out.append((ch, False))
                i += 1
            else:
                return None
            fill = False
    return out


def _name(text: str, pattern: str, fill: bool) -> str:
    if pattern.isupper():
        text = text.upper()
    elif pattern.islower():
        text = text.lower()
    return text if fill else text.ljust(9)


def render(parts: list[tuple[str, bool]], d: date) -> str:
    """PostgreSQL's to_char of date ``d`` (at midnight) for :func:`to_char_pattern`'s parts."""
    iso = d.isocalendar()
    doy = d.timetuple().tm_yday
    out: list[str] = []
    for part, fill in parts:
        if not part.startswith("%"):
            out.append(part)
            continue
        p = part[1:]
        up = p.upper()

        def num(v: int, width: int, fill: bool = fill) -> str:
            return str(v) if fill else str(v).zfill(width)

        if up == "YYYY":
            out.append(num(d.year, 4))
        elif up == "IYYY":
            out.append(num(iso.year, 4))
        elif up == "YYY":
            out.append(num(d.year % 1000, 3))
        elif up == "YY":
            out.append(num(d.year % 100, 2))
        elif up == "MONTH":
            out.append(_name(_MONTHS[d.month - 1], p, fill))
        elif up == "MON":
            out.append(_name(_MONTHS[d.month - 1][:3], p, True))
        elif up == "MM":
            out.append(num(d.month, 2))
        elif up == "DAY":
            out.append(_name(_DAYS[d.weekday()], p, fill))
        elif up == "DY":
            out.append(_name(_DAYS[d.weekday()][:3], p, True))
        elif up == "DDD":
            out.append(num(doy, 3))
        elif up == "DD":
            out.append(num(d.day, 2))
        elif up == "D":
            out.append(str(iso.weekday % 7 + 1))
        elif up == "ID":
            out.append(str(iso.weekday))
        elif up == "IW":
            out.append(num(iso.week, 2))
        elif up == "WW":
            out.append(num((doy - 1) // 7 + 1, 2))
        elif up == "Q":
            out.append(str((d.month - 1) // 3 + 1))
    return "".join(out)
