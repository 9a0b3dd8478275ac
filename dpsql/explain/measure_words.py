"""EXPLAIN's measures in the statement's words (newcomer30 W4).

A measure is what PostgreSQL computes and dpsql releases with noise; one aggregate may need
several (an AVG its sum and its count, a VARIANCE also its sum of squares) and one measure may
serve several aggregates (AVG(amount) and COUNT(amount) share a count). Its internal key
(``sum_centered(amount)[0,500]``, ``count_values(amount)[0,0]``) names dpsql's rewrite, not
the statement: EXPLAIN names it by the aggregates it serves, as written, and the part each
reads, with the bounds its values are clamped to in plain numbers.

>>> from dpsql.policy.load import load_policy
>>> from dpsql.sql.analyze import analyze
>>> from dpsql.sql.parse import parse_statement
>>> policy = load_policy("dpsql/demo/policy.yaml")
>>> sql = "SELECT AVG(amount), COUNT(amount) FROM purchases"
>>> sorted(measure_words(analyze(parse_statement(sql).tree, policy)).values())
['COUNT(amount) and the count part of AVG(amount)', 'the sum part of AVG(amount) (amount clamped to [0, 500])']
"""

from __future__ import annotations

from fractions import Fraction

from dpsql.sql.analysis import Analysis, Measure
from dpsql.sql.wording import plain_sql

PARTS: dict[str, tuple[str, ...]] = {
    "avg": ("sum", "count"),
    "var_pop": ("sum of squares", "sum", "count"),
    "var_samp": ("sum of squares", "sum", "count"),
    "stddev_pop": ("sum of squares", "sum", "count"),
    "stddev_samp": ("sum of squares", "sum", "count"),
}
"""The part each of a statistic's measures is, in its measures' order (:class:`Statistic`)."""

_CLAMPED = ("sum", "sum_centered", "sum_sq_centered")


def measure_words(a: Analysis, bounds: bool = True) -> dict[str, str]:
    """Each of ``a``'s measures (by :attr:`Measure.key`) in words: the aggregates it serves,
    as written, and the part of each (``bounds``: and the range its values are clamped to);
    its internal name where no aggregate reads it."""
    served: dict[str, dict[str, list[str]]] = {}  # key -> part ("": the whole) -> aggregates
    for s in a.statistics:
        parts = PARTS.get(s.func, ())
        for i, key in enumerate(s.measures):
            part = parts[i] if i < len(parts) else ""
            texts = served.setdefault(key, {}).setdefault(part, [])
            if s.sql not in texts:
                texts.append(s.sql)
    out: dict[str, str] = {}
    for m in a.measures:
        by_part = served.get(m.key)
        if not by_part:
            out[m.key] = m.shown
            continue
        said = [
            _and(texts) if not part else f"the {part} part of {_and(texts)}"
            for part, texts in sorted(by_part.items(), key=lambda kv: kv[0] != "")
        ]
        out[m.key] = _and(said) + (_bounds(m) if bounds else "")
    return out


def _bounds(m: Measure) -> str:
    """The range a measure's values are clamped to, and a cap over groups, in words."""
    arg = plain_sql(m.arg) if m.arg is not None else ""
    said = []
    if m.kind in _CLAMPED and arg:
        said.append(f"{arg} clamped to [{_num(m.lo)}, {_num(m.hi)}]")
    elif m.kind == "quantile" and arg:
        said.append(f"{arg} in [{_num(m.lo)}, {_num(m.hi)}]")
    elif m.kind in ("mode", "count_keys"):
        among = m.candidates_from or (f"{len(m.candidates)} listed" if m.candidates else "")
        said += [f"among the keys of {among}"] if among else []
    if m.total is not None:
        said.append(f"at most {_num(m.total)} per unit over all groups")
    return f" ({'; '.join(said)})" if said else ""


def _num(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{float(x):.6g}"


def _and(texts: list[str]) -> str:
    return " and ".join([", ".join(texts[:-1]), texts[-1]] if len(texts) > 1 else texts)


def l1_caps(a: Analysis) -> str:
    """The L1 caps over a unit's groups (auto bounds for per-group COUNT and SUM), as text."""
    capped = [(m.kind.split("_")[0].upper(), m.total) for m in a.measures if m.total is not None]
    if not capped:
        return ""
    caps = ", ".join(f"{kind} {float(total):.6g}" for kind, total in capped)
    from dpsql.sql.auto_bounds import declared_total

    n = declared_total(a)
    source = f", from the policy's max_rows_per_unit_total {n}" if n is not None else ""
    return f", and per unit over all its groups at most: {caps} (L1 cap{source})"
