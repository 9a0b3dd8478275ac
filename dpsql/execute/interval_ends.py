"""A tree statement's interval ends as their output column's type: rounded outwards (a float
end never lands one ulp inside the interval it stands for), a NULL end kept as no bound."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from dpsql.execute.bias import round_outwards


def column_ends(lo: Any, hi: Any, kind: str) -> tuple[Any, Any]:
    """One interval's ends as its column's type: rounded outwards, never inwards. A NULL end
    is no bound on that side (the other end still holds)."""
    if (lo is None and hi is None) or kind == "keep":
        return lo, hi
    if not all(isinstance(x, (int, float, Decimal)) for x in (lo, hi) if x is not None):
        return None, None  # never: dates keep their own type (interval_sql.TIME_ENDS)
    if kind == "int":
        return (
            None if lo is None else math.floor(Decimal(lo)),
            None if hi is None else math.ceil(Decimal(hi)),
        )
    # a numeric's nearest float may lie inside
    a = None if lo is None else math.nextafter(float(lo), -math.inf)
    b = None if hi is None else math.nextafter(float(hi), math.inf)
    if not all(math.isfinite(x) for x in (a, b) if x is not None):
        return None, None
    if a is None or b is None:  # no width to round to: the end as it came, as a float not
        # inside it (a kept lower end 1730000 went out as 1729999.9999999998, one ulp below)
        return _as_float(lo, down=True), _as_float(hi, down=False)
    return round_outwards((a, b), (b - a) / 2)


def _as_float(v: Any, down: bool) -> float | None:
    """``v`` as the float nearest it on its outer side (itself where exact; None stays None)."""
    if v is None:
        return None
    f = float(v)
    if down and Decimal(f) > Decimal(v):
        return math.nextafter(f, -math.inf)
    if not down and Decimal(f) < Decimal(v):
        return math.nextafter(f, math.inf)
    return f


__all__ = ["column_ends"]
