"""The ``_low``/``_high`` interval columns of a tree statement (``SET dpsql.show_intervals``).

:mod:`dpsql.sql.tree_intervals` rewrites the post-processing so that each noisy output value
has its interval's ends beside it (hidden columns). Here, around the leaves' release:

1. :func:`leaf_shapes`: what each leaf's released rows carry (which columns have intervals,
   which rows the leaf has).
2. :func:`~dpsql.execute.tree_levels.leaf_levels`: the level each leaf's intervals are released at. An output row built
   from k leaf intervals holds when all k hold: at least 1 - k x (1 - level) by the union
   bound, so a leaf whose values enter an output row k at a time is asked for 1 - alpha/k.
   k is counted per output row, before any release, by running the rewritten post-processing
   over the leaves' public rows (``key_rows``: every declared key combination, values
   NULL) with each leaf interval's miss set to 1 (``counted_reads``): a re-aggregation
   ``SUM(n) ... GROUP BY category`` over (category, region) rows reads one category's rows,
   not all of them. Where that count is not known (no rows, the query failed) k is the static
   one (``static_reads``: all of a leaf's declared rows).
3. :func:`post_sql_iv`: the post-processing SQL with each ``_dpsql_ivleaf_i`` placeholder
   replaced by leaf i's rows *with* its interval columns, and its miss (1 - its level).
4. :func:`attach`: the hidden columns taken off the result and returned as ``<column>_low`` /
   ``<column>_high`` after the statement's own columns (as on the flat path). Each row's value
   carries its miss, the sum of the misses of the leaf intervals it read at the levels they
   were actually released at (a stored leaf keeps its own): a row whose miss exceeds
   1 - confidence gets NULL, and the notice says why. That check, on the real rows, is what
   makes the level honest; the count in step 2 only chooses levels that pass it.

Nothing here reads a private row: it works on released values and their intervals.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlglot import exp

from dpsql.errors import UpstreamError
from dpsql.execute.disowned import NULLED_WORDS
from dpsql.execute.finish import interval_arrays
from dpsql.execute.interval_ends import column_ends
from dpsql.execute.noise import Release
from dpsql.execute.tree_interval_text import short_of, what_of, why_not
from dpsql.execute.tree_levels import static_reads
from dpsql.result import IntervalFallback, ResultColumn
from dpsql.sql.analysis import Analysis
from dpsql.sql.interval_sql import ENDS, HIDDEN, IV_LEAF, Held
from dpsql.sql.intervals import derived_outputs
from dpsql.sql.order_ties import order_ties
from dpsql.sql.postprocess import (
    interval_base,
    interval_is_integer,
    interval_time_type,
    outer_query,
    outer_sql,
    shift_arrays,
    stat_outputs,
)
from dpsql.sql.tree_intervals import IvPlan, LeafCol, LeafShape, OutCol
from dpsql.sql.wording import plural

log = logging.getLogger("dpsql.execute.intervals")
INT8, FLOAT8 = 20, 701
OIDS = {"int8": INT8, "float8": FLOAT8, "date": 1082, "timestamp": 1114, "timestamptz": 1184}


def leaf_shape(a: Analysis, label: str, bound: int | None = None) -> LeafShape:
    """What leaf ``a``'s released rows carry (:class:`dpsql.sql.tree_intervals.LeafShape`);
    ``bound``: its rows at most (:func:`row_bound`), when known."""
    direct = dict(stat_outputs(a))
    derived = {pos: k for k, (pos, _, _) in enumerate(derived_outputs(a))}
    cols: list[LeafCol] = []
    for pos, item in enumerate(a.outer.expressions):
        name = item.alias_or_name
        body = item.this if isinstance(item, exp.Alias) else item
        if pos in direct:
            si = direct[pos]
            s = a.statistics[si]
            if s.func == "mode":
                why = "mode() carries a guarantee on its row count, not a value interval"
                cols.append(LeafCol(name, True, None, why))
                continue
            additive = s.func in ("count", "count_distinct", "sum")
            integral = interval_is_integer(a, si)
            end = interval_time_type(a, si) or ("int8" if integral else "float8")
            cols.append(LeafCol(name, True, str(si), "", additive, integral, end))
        elif pos in derived:
            cols.append(LeafCol(name, True, f"d{derived[pos]}"))
        elif any(c.name.startswith("_dp_s") for c in body.find_all(exp.Column)):
            why = f"{label} computes it from noisy statistics by an expression dpsql can't bound"
            cols.append(LeafCol(name, True, None, why))
        else:
            cols.append(LeafCol(name, False))
    o, why = a.outer, ""
    if o.args.get("where") is not None:
        why = "keeps the rows its HAVING chooses by their noisy values"
    elif o.args.get("distinct") is not None:
        why = "merges rows whose noisy values coincide (DISTINCT)"
    elif o.args.get("offset") is not None or not _keeps_all(o, bound):
        why = (
            "keeps the rows its ORDER BY ... LIMIT chooses by their noisy values"
            if o.args.get("order") is not None
            else "keeps only part of its rows (LIMIT)"
        )
    if why:
        rows = "chosen"
    elif not a.group_keys:
        rows = "one"
    elif a.needs_selection:
        rows = "selected"
    else:
        rows = "declared"
    return LeafShape(label, tuple(cols), rows, why)


def _keeps_all(o: exp.Select, bound: int | None) -> bool:
    """No LIMIT, or a LIMIT without ORDER BY at least the rows there are (Superset's
    ``LIMIT 50000``): every row is kept."""
    limit = o.args.get("limit")
    if limit is None:
        return True
    n = limit.expression
    if o.args.get("order") is not None or bound is None or not isinstance(n, exp.Literal):
        return False
    return n.is_int and int(n.this) >= bound


def row_bound(a: Analysis, declared: Any) -> int | None:
    """How many rows leaf ``a`` releases at most: 1 without GROUP BY, the declared key
    combinations (summed over grouping sets), None when partition selection picks them."""
    if not a.group_keys:
        return 1
    sets = declared if a.grouping_sets else [declared]
    total = 0
    for d in sets:
        if d is None:
            return None
        total += math.prod(len(k) for k in d)
    return total


def miss_of(rel: Release | None) -> Decimal:
    """A leaf interval's miss probability, exactly as its level says (1: no level known)."""
    if rel is None or rel.confidence is None:
        return Decimal(1)
    return Decimal(1) - Decimal(rel.confidence)


def _leaf_rows(
    a: Analysis, rel: Release, ivs: Sequence[tuple[str, int]], offset: int, miss: Decimal
) -> Any:
    """Leaf ``a``'s released rows with its interval columns (each with its ``_miss``), the
    arrays numbered from offset."""
    names = [(label, f"_dpsql_iv{hid}") for label, hid in ivs]
    q, _ = outer_query(a, rel.key_types, interval_columns=names)
    for _, hid in ivs:  # our own number, not user data: a numeric literal
        m = exp.cast(exp.Literal.string(format(miss, "f")), "numeric")
        q.append("expressions", exp.alias_(m, f"_dpsql_iv{hid}_miss"))
    arrays: list[list[Any]] = [[g[i] for g in rel.groups] for i in range(len(rel.key_types))]
    arrays += [[row[j] for row in rel.stats] for j in range(len(a.statistics))]
    for label, _ in ivs:
        if label.startswith("d"):
            k = int(label[1:])
            got = [row[k] for row in rel.derived] if rel.derived else [None] * len(rel.groups)
        else:
            # one end only (the other disowned by the leaf's accuracy notice): that end is NULL
            # here, no bound on that side, and the interval arithmetic keeps it NULL wherever
            # it could move what is computed (dpsql.sql.interval_sql)
            got = [row[int(label)] for row in rel.intervals]
        arrays += interval_arrays(a, label, got)
    if not arrays:
        arrays.append(list(range(len(rel.groups))))
    return shift_arrays(q, offset), arrays


def nulled_text(base: str, n: int, rows: int, releases: Sequence[Release | None]) -> str:
    """Why ``n`` of ``rows`` rows have NULL interval columns though what they read is covered
    by the union bound, when a leaf's accuracy notice disowns an interval (NULL there, so NULL
    in what reads it: issue 16); '' when none does (a divisor whose interval holds 0)."""
    if not any(
        rel is not None and any(w in x for x in rel.notes for w in NULLED_WORDS) for rel in releases
    ):
        return ""
    where = f" in {n} of {rows} rows" if n < rows else ""
    return (
        f"{base}_low, {base}_high are NULL{where}: a value it reads has an interval its "
        "part's accuracy notice (above) says does NOT hold, so none is shown for what is "
        "computed from it (or a divisor's interval holds 0)"
    )


def one_end_text(base: str, end: str, n: int, rows: int) -> str:
    """Why ``n`` of ``rows`` rows have one interval column NULL (``end``) and the other kept:
    a value it reads has an interval of which its part's accuracy notice keeps one end only;
    interval arithmetic over the ends that hold (a NULL end unbounded: dpsql.sql.interval_sql,
    module doc) still bounds it on the other side, where the expression allows (a sum, a
    positive multiple; a product's corners do not: both NULL)."""
    kept = "high" if end == "low" else "low"
    where = f" in {n} of {rows} rows" if n < rows else ""
    side = "at or above" if kept == "low" else "at or below"
    return (
        f"{base}_{end} is NULL{where}: a value it reads has an interval of which its part's "
        "accuracy notice (above) keeps one end only, so nothing bounds it on that side; "
        f"{base}_{kept} still holds at the stated level (the truth is {side} it)"
    )


def post_sql_iv(
    plan: IvPlan,
    plain: Sequence[tuple[exp.Expr, list[list[Any]]]],
    analyses: Sequence[Analysis],
    releases: Sequence[Release],
    misses: Sequence[Decimal] | None = None,
) -> tuple[str, dict[str, list[Any]]]:
    """The rewritten post-processing's SQL: each ``_dpsql_leaf_i`` placeholder replaced by the
    leaf's rows (``plain[i]``: its query and arrays, numbered from 0), each
    ``_dpsql_ivleaf_i`` by its rows with interval columns; and the array parameters.
    ``misses[i]``: leaf i's interval miss (default: from its release's level)."""
    miss = list(misses) if misses is not None else [miss_of(r) for r in releases]
    params: dict[str, list[Any]] = {}
    out = order_ties(plan.post.copy())

    def add(q: exp.Expr, arrays: list[list[Any]], renumbered: bool) -> exp.Expr:
        base = len(params)
        if not renumbered:
            q = shift_arrays(q, base)
        for arr in arrays:
            params[f"_dpsql_arr{len(params)}"] = arr
        return q

    from dpsql.sql.tree import LEAF_PREFIX

    def placeholder(s: exp.Select) -> tuple[str, int] | None:
        src = s.args.get("from_")
        t = src.this if src is not None else None
        if not isinstance(t, exp.Table) or len(s.expressions) != 1:
            return None
        if not isinstance(s.expressions[0], exp.Star) or s.args.get("where"):
            return None
        for prefix in (IV_LEAF, LEAF_PREFIX):
            if t.name.startswith(prefix) and t.name[len(prefix) :].isdigit():
                return prefix, int(t.name[len(prefix) :])
        return None

    selects = [out] if isinstance(out, exp.Select) else []
    selects += [s for s in out.find_all(exp.Select) if s is not out]
    for s in selects:
        hit = placeholder(s)
        if hit is None:
            continue
        prefix, i = hit
        if prefix == IV_LEAF:
            q, arrays = _leaf_rows(analyses[i], releases[i], plan.leaf_ivs[i], len(params), miss[i])
            new = add(q, arrays, renumbered=True)
        else:
            new = add(plain[i][0], plain[i][1], renumbered=False)
        if s is out:
            out = new
        else:
            s.replace(new)
    return outer_sql(out), params  # type: ignore[arg-type]


def upstream_fallback(e: UpstreamError, what: str) -> IntervalFallback:
    """PostgreSQL refused a query of the interval columns (``what``). Expected for a data
    exception (class 22: the ends' arithmetic overflowed, a value out of a function's range):
    these values have no computable interval. Any other (an undefined function, a type
    mismatch) means the rewrite wrote SQL PostgreSQL can't run: unexpected, a bug."""
    expected = (e.sqlstate or "").startswith("22")
    return IntervalFallback(
        f"dpsql could not compute it ({e.message})",
        expected,
        "" if expected else f"{what}: {e.sqlstate}: {e.message}",
    )


def reported(fallbacks: Sequence[IntervalFallback], fingerprint: str) -> None:
    """Log each unexpected fallback at ERROR with the statement's fingerprint (the statement
    is still answered: its intervals NULL, the notice says why)."""
    for f in fallbacks:
        if not f.expected:
            log.error(
                "interval columns fell back to NULL on an unexpected error (statement %s): %s",
                fingerprint,
                f.error,
            )


@dataclass(frozen=True)
class Attached:
    """The statement's columns and rows with the interval columns, the per-row intervals (for
    the CLI), and a notice line per noisy output column."""

    columns: tuple[ResultColumn, ...]
    rows: list[tuple[Any, ...]]
    intervals: list[tuple[tuple[float, float] | None, ...]]
    notes: tuple[str, ...]


def attach(
    plan: IvPlan,
    columns: Sequence[ResultColumn],
    rows: Sequence[Sequence[Any]],
    releases: Sequence[Release | None],
    labels: Sequence[str],
    confidence: float,
    failed: str = "",
    reads: dict[int, int | None] | None = None,
) -> Attached:
    """Strip the hidden columns, add ``<column>_low``/``_high`` per noisy output (module doc).
    ``failed``: why the rewritten query could not run (every interval then NULL); ``reads``:
    per output (hid) the leaf intervals a row reads at most, for the notice (default: counted
    from the plan, :func:`static_reads`)."""
    hidden: dict[str, list[int]] = {}
    visible: list[int] = []
    for j, c in enumerate(columns):
        m = HIDDEN.match(c.name)
        if m:
            hidden.setdefault(c.name, []).append(j)
        else:
            visible.append(j)
    names = [columns[j].name for j in visible]
    seen: dict[str, int] = {}
    at: dict[int, OutCol] = {}  # visible position -> its noisy output
    for out in plan.outputs:
        k = seen.get(out.name.lower(), 0)
        seen[out.name.lower()] = k + 1
        same = [p for p, n in enumerate(names) if n.lower() == out.name.lower()]
        if k < len(same):
            at[same[k]] = out
    counts = [max(1, len(r.groups)) if r is not None else None for r in releases]
    ks = dict(reads) if reads is not None else static_reads(plan, counts)
    alpha = Decimal(1) - Decimal(confidence)
    extra_cols: list[ResultColumn] = []
    getters: list[tuple[int, int, int] | None] = []
    kinds: list[str] = []
    whys: list[str] = []
    for p in range(len(names)):
        o = at.get(p)
        if o is None:
            continue
        why = failed or why_not(o, hidden)
        info = o.info if isinstance(o.info, Held) else None
        if info is not None and info.passthrough:  # the type is the plan's: Describe's too
            kind, oid = "keep", OIDS.get(info.end, FLOAT8)
        elif info is not None and info.integral:
            kind, oid = "int", INT8
        elif info is None and columns[visible[p]].type_oid in (20, 21, 23):
            kind, oid = "int", INT8
        else:
            kind, oid = "float", FLOAT8
        src = None if why else info
        base = interval_base(names, p)
        extra_cols += [
            ResultColumn(f"{base}_low", oid),
            ResultColumn(f"{base}_high", oid),
        ]
        if src is not None:
            lo, hi, ms = (hidden[f"_dpsql_iv{src.hid}_{e}"][0] for e in ENDS)
            getters.append((lo, hi, ms))
        else:
            getters.append(None)
        kinds.append(kind)
        whys.append(why)
    out_rows: list[tuple[Any, ...]] = []
    ivs: list[tuple[tuple[float, float] | None, ...]] = []
    short: list[list[Decimal]] = [[] for _ in getters]  # per output: the rows' misses over alpha
    absent = [0 for _ in getters]  # per output: rows that read a leaf value with no release
    nulled = [0 for _ in getters]  # per output: rows whose interval came out NULL
    # per output: rows with one end only, by the end that is NULL ("low", "high")
    halved: list[dict[str, int]] = [{"low": 0, "high": 0} for _ in getters]
    for r in rows:
        ends: list[Any] = []
        row_iv: list[tuple[float, float] | None] = [None] * len(visible)
        slot = 0
        for p in range(len(visible)):
            if p not in at:
                continue
            g, kind = getters[slot], kinds[slot]
            pair: tuple[Any, Any] = (None, None)
            if g is not None:
                miss = Decimal(1) if r[g[2]] is None else Decimal(r[g[2]])
                if miss <= alpha + _SLACK:  # the union bound over what this row read
                    pair = column_ends(r[g[0]], r[g[1]], kind)
                    if pair == (None, None) and r[visible[p]] is not None:
                        nulled[slot] += 1  # a leaf interval disowned, or a divisor's holds 0
                    elif (pair[0] is None) != (pair[1] is None) and r[visible[p]] is not None:
                        halved[slot]["low" if pair[0] is None else "high"] += 1
                elif r[g[2]] is None and r[g[0]] is not None and r[g[1]] is not None:
                    absent[slot] += 1  # e.g. COALESCE(x, 0) where x's group was not released
                elif r[g[2]] is not None:
                    # short of the level (ends NULL too when a leaf's notice disowns one: the
                    # row must not count as held at the session's level either)
                    short[slot].append(miss)
            if r[visible[p]] is None:
                pair = (None, None)  # no value, no interval (finish.null_with_value)
            slot += 1
            ends += pair
            if kind != "keep" and (pair[0] is not None or pair[1] is not None):
                # (for the CLI: an infinite end is one that does not hold, as on the flat path)
                row_iv[p] = (
                    -math.inf if pair[0] is None else float(pair[0]),
                    math.inf if pair[1] is None else float(pair[1]),
                )
        out_rows.append(tuple(r[j] for j in visible) + tuple(ends))
        ivs.append((*row_iv, *([None] * len(ends))))  # one per column, as the rows
    notes: list[str] = []
    slot = 0
    for p in range(len(names)):
        o = at.get(p)
        if o is None:
            continue
        base, why, over = interval_base(names, p), whys[slot], short[slot]
        if why:
            notes.append(f"{base}_low, {base}_high are NULL: {why}")
        elif over or absent[slot]:
            assert isinstance(o.info, Held)
            n = len(over) + absent[slot]
            reasons = [short_of(o.info, max(over), releases, labels, confidence)] if over else []
            if absent[slot]:
                reasons.append(
                    "it reads a value whose group was not released (partition selection or a "
                    "choice by noisy values left it out), so its true value is not known"
                )
            notes.append(
                f"{base}_low, {base}_high are NULL"
                + (f" in {n} of {len(rows)} rows" if n < len(rows) else "")
                + ": "
                + "; and ".join(reasons)
            )
        else:
            # newcomer26 #16: "avg: the interval of ... unchanged" read beside "avg_low, avg_high
            # are NULL" (every row's, disowned by the part's notice): no interval is promised
            # where none is shown, and where some rows' are NULL the line speaks of the others
            told = nulled_text(base, nulled[slot], len(rows), releases) if nulled[slot] else ""
            if not (told and nulled[slot] >= len(rows)):
                what = what_of(o.info, labels, releases, ks, confidence)
                rest = f" (the other {plural(len(rows) - nulled[slot], 'row')})" if told else ""
                notes.append(f"{base}: {what}{rest}")
        if nulled[slot] and not why:
            notes += [t] if (t := nulled_text(base, nulled[slot], len(rows), releases)) else []
        for end, n in halved[slot].items():
            if n and not why:
                notes.append(one_end_text(base, end, n, len(rows)))
        slot += 1
    cols = tuple(columns[j] for j in visible) + tuple(extra_cols)
    # (a LIMIT that cut nothing chose no row: the flat path's picked_words says nothing there)
    cut = plan.limit is None or len(rows) >= plan.limit
    if plan.chosen and cut and any(isinstance(o.info, Held) for o in at.values()):
        notes.append(
            f"the rows shown are chosen by noisy values ({plan.chosen}): each row's interval "
            "is about its own group, but which groups appear is itself noisy (the truly largest "
            "may be missing)"
        )
    return Attached(cols, out_rows, ivs, tuple(notes))


_SLACK = Decimal("1e-12")  # a level's float rounding, summed over the intervals a row reads


__all__ = [
    "Attached",
    "attach",
    "leaf_shape",
    "miss_of",
    "post_sql_iv",
    "reported",
    "upstream_fallback",
]
