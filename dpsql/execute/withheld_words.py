"""What the notices say where the post-processing reads a withheld statistic (null30).

A statistic dpsql withholds (NULL: no clear answer at this epsilon, its own notice says why) is
unknown, not missing. :mod:`dpsql.sql.withheld` keeps every value computed from it NULL; these
words say so in the analyst's terms, and say what a NULL does to a HAVING or an ORDER BY:

* an output: ``COALESCE(AVG(income), 0): withheld (NULL) in 3 of 3 rows (educ 1, educ 2,
  educ 9): it reads AVG(income), withheld there ...``;
* HAVING: a condition on an unknown value is not true, so SQL leaves the group out: the groups
  left out where the condition reads a withheld value are named (in the data each may pass);
* ORDER BY: the rows whose sort value is withheld sort where PostgreSQL puts NULLs (last
  ascending, first descending), not by their data; with LIMIT/OFFSET, which rows are shown
  rests on them.

The rows are kept, not refused: whether a value is withheld is known only once the release is
paid for, so a refusal would spend the budget for no answer (and its free repeat would refuse
again), while the rows that do not rest on a withheld value are answers like any other; SQL's
own NULL semantics decide the rest, and these words name every row they touch.
(Post-processing: the released values only, nothing read from the data, nothing charged.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from dpsql.execute.noise import Release
from dpsql.sql.analysis import Analysis
from dpsql.sql.post_guards import HELD
from dpsql.sql.select_outer import item_name
from dpsql.sql.withheld import held_statistics, statistic_columns
from dpsql.sql.withheld_post import CLAUSES, GUESSED, withheld_names
from dpsql.sql.wording import plain_sql, plural

_SHOWN = 4  # rows named in a notice; the rest counted
_DO = (
    "To get a value: raise dpsql.epsilon, or ask about larger groups (fewer, wider keys, or a "
    "wider WHERE)"
)


def withheld_notices(
    a: Analysis,
    tree: exp.Expr,
    stats: Sequence[Sequence[object]],
    groups: Sequence[Sequence[str | None]],
    data: Sequence[Sequence[object]],
    rids: Sequence[int] | None,
) -> tuple[str, ...]:
    """The notices for the outputs, HAVING and ORDER BY of a flat private statement that read a
    withheld statistic. ``tree``: the statement as written (for its words); ``stats``/``groups``:
    the release's rows; ``data``/``rids``: the post-processing's rows and the release row each
    came from (None under DISTINCT: no row-by-row words)."""
    if rids is None or not any(v is None for row in stats for v in row):
        return ()
    out: list[str] = []
    texts = _select_texts(tree, len(a.outer.expressions))
    labels = _Labels(a, groups)
    said: dict[tuple[tuple[int, ...], str], list[str]] = {}  # outputs by (rows, what they read)
    for pos, item in enumerate(a.outer.expressions):
        held = held_statistics(item)
        rows = tuple(
            rid
            for r, rid in zip(data, rids, strict=True)
            if pos < len(r) and r[pos] is None and any(stats[rid][si] is None for si in held)
        )
        if rows:  # what it reads that is withheld there
            gone = [si for si in held if any(stats[rid][si] is None for rid in rows)]
            said.setdefault((rows, _stat_texts(a, gone)), []).append(texts[pos])
    for (rows, reads), outputs in said.items():
        out.append(
            f"{'; '.join(outputs)}: withheld (NULL) in {len(rows)} of "
            f"{plural(len(data), 'row')} ({labels(rows)}): "
            f"{'it reads' if len(outputs) == 1 else 'each reads'} {reads}, withheld there (NULL: "
            "no clear answer at this epsilon, its notice says why). A value computed from a "
            "withheld one is withheld too: COALESCE, CASE, IS NULL, NULLIF, GREATEST/LEAST and "
            "CONCAT do not put a value in its place (it is unknown, not missing). "
            f"{_DO}; drop the COALESCE (or CASE) to see {reads} itself NULL there."
        )
    flat = _Flat(a, tree, stats, rids, labels)
    out += _having(flat) + _order(flat)
    return tuple(out)


def reads_withheld(
    a: Analysis, stats: Sequence[Sequence[object]], rids: Sequence[int] | None
) -> Callable[[int, int], bool]:
    """Whether output ``pos`` of post-processing row ``r`` reads a statistic withheld there."""
    reads = [[int(c[5:]) for c in statistic_columns(e)] for e in a.outer.expressions]

    def withheld(r: int, pos: int) -> bool:
        if rids is None or pos >= len(reads):
            return False
        return any(stats[rids[r]][si] is None for si in reads[pos])

    return withheld


@dataclass(frozen=True)
class _Flat:
    """A flat statement's release rows and the post-processing rows shown (for the HAVING and
    ORDER BY words)."""

    a: Analysis
    tree: exp.Expr
    stats: Sequence[Sequence[object]]
    rids: Sequence[int]  # the release row each shown row came from
    labels: _Labels

    def clauses(self, key: str) -> tuple[exp.Expr | None, exp.Expr | None]:
        """The post-processing's clause ``key`` and the analyst's own."""
        written = self.tree.args.get(key) if isinstance(self.tree, exp.Select) else None
        return self.a.outer.args.get(key), written

    def withheld(self, rid: int, read: Sequence[int]) -> bool:
        return any(self.stats[rid][si] is None for si in read)

    def not_shown(self, read: Sequence[int], unless: Sequence[int] = ()) -> list[int]:
        """The release rows not shown that have a statistic of ``read`` withheld (and none of
        ``unless``: said elsewhere)."""
        seen = set(self.rids)
        return [
            rid
            for rid in range(len(self.stats))
            if rid not in seen and self.withheld(rid, read) and not self.withheld(rid, unless)
        ]

    @property
    def limited(self) -> bool:
        return bool(self.a.outer.args.get("limit") or self.a.outer.args.get("offset"))


def _read(node: exp.Expr | None) -> list[int]:
    return [int(c[5:]) for c in statistic_columns(node)] if node is not None else []


def _having(f: _Flat) -> list[str]:
    where, _ = f.clauses("where")
    _, having = f.clauses("having")
    if where is None or having is None:
        return []
    read = _read(where)
    left = f.not_shown(read)
    if not left:
        return []
    return [
        f"HAVING {plain_sql(having.this)}: {plural(len(left), 'group')} left out "
        f"({f.labels(left)}) where it reads a withheld {_stat_texts(f.a, read)} (NULL: no clear "
        "answer at this epsilon): a condition on an unknown value is not true, so SQL leaves "
        "the group out; in the data each may pass it"
        + (" (or the LIMIT left it out)" if f.limited else "")
        + f". {_DO}."
    ]


def _order(f: _Flat) -> list[str]:
    order, written = f.clauses("order")
    if order is None or written is None:
        return []
    read = _read(order)
    if not read:
        return []
    shown = [rid for rid in f.rids if f.withheld(rid, read)]
    # (a row a HAVING on a withheld value left out: said there)
    hidden = f.not_shown(read, unless=_read(f.a.outer.args.get("where")))
    if not shown and not (f.limited and hidden):
        return []
    text = plain_sql(written).removeprefix("ORDER BY ")
    parts = []
    if shown:
        parts.append(
            f"{plural(len(shown), 'row')} shown ({f.labels(shown)}) sort by a withheld "
            f"{_stat_texts(f.a, read)} (NULL: no clear answer at this epsilon): they stand where "
            "PostgreSQL puts NULLs (last ascending, first descending, unless NULLS FIRST/LAST "
            "says otherwise), not where their data would"
        )
    if f.limited and hidden:
        parts.append(
            f"{plural(len(hidden), 'row')} not shown ({f.labels(hidden)}) have it withheld too: "
            "which rows the LIMIT keeps rests on withheld values"
        )
    return [f"ORDER BY {text}: " + "; ".join(parts) + f". {_DO}."]


def _stat_texts(a: Analysis, stats: Sequence[int]) -> str:
    return " or ".join(dict.fromkeys(a.statistics[si].sql for si in stats))


def _select_texts(tree: exp.Expr, n: int) -> list[str]:
    """Each output as the analyst wrote it (the select list), else its position."""
    items = tree.expressions if isinstance(tree, exp.Select) else []
    if len(items) == n:
        return [plain_sql(e.unalias()) for e in items]
    return [f"column {k + 1}" for k in range(n)]


class _Labels:
    """A few release rows named by their group keys (``educ 1, educ 2 and 3 more``)."""

    def __init__(self, a: Analysis, groups: Sequence[Sequence[str | None]]) -> None:
        self.names = [plain_sql(g.expr) for g in a.group_keys]
        self.groups = groups

    def __call__(self, rows: Sequence[int]) -> str:
        if not self.names:
            return "the one row"
        named = [
            ", ".join(
                f"{n} {'NULL' if v is None else v}"
                for n, v in zip(self.names, self.groups[r], strict=False)
            )
            for r in rows[:_SHOWN]
        ]
        more = len(rows) - len(named)
        return "; ".join(named) + (f" and {more} more" if more > 0 else "")


def tree_withheld(
    tree: exp.Expr,
    post: exp.Expr,
    labels: Sequence[str],
    releases: Sequence[Release],
    data: Sequence[Sequence[object]],
) -> tuple[str, ...]:
    """The notices for a statement of several DP leaves whose output, HAVING or ORDER BY reads
    a leaf's withheld value (:mod:`dpsql.sql.withheld_post` holds it NULL): which outputs, in
    which rows (named by the outputs no withheld value reaches, as the flat words name groups),
    and which leaves withheld values. An output held there is NULL where what it reads is
    withheld (or NULL by SQL's own rules: a row an outer join did not find, a NULLIF)."""
    gone = [
        labels[i] if i < len(labels) else f"leaf {i}"
        for i, rel in enumerate(releases)
        if any(v is None for row in rel.stats for v in row)
    ]
    if not gone or not isinstance(post, exp.Select):
        return ()
    texts = _select_texts(tree, len(post.expressions))
    held = [any(n.meta.get(HELD) for n in item.walk()) for item in post.expressions]
    may = withheld_names(post)
    keys = [
        k
        for k, item in enumerate(post.expressions)
        if not held[k] and item_name(item).lower() not in may
    ][:2]  # the columns that name a row

    def named(rows: Sequence[int]) -> str:
        if not keys or len(data) < 2:
            return ""
        shown = [
            ", ".join(f"{texts[k]} {'NULL' if data[r][k] is None else data[r][k]}" for k in keys)
            for r in rows[:_SHOWN]
        ]
        more = len(rows) - len(shown)
        return ": " + "; ".join(shown) + (f" and {more} more" if more > 0 else "")

    where = f"{', '.join(gone)} withheld values: NULL, no clear answer at this epsilon"
    out = []
    said, guessed = [], []
    for pos, item in enumerate(post.expressions):
        nulls = [r for r, row in enumerate(data) if pos < len(row) and row[pos] is None]
        if held[pos] and nulls:
            said.append(f"{texts[pos]} (NULL in {len(nulls)} of {plural(len(data), 'row')}"
                        f"{named(nulls)})")  # fmt: skip
            if any(n.meta.get(GUESSED) for n in item.walk()):
                guessed.append(texts[pos])
    if said:
        caveat = (
            f" In {'; '.join(guessed)}, a NULL an outer join made (no row found) is read as "
            "withheld too: dpsql can't tell the two apart there (a FULL JOIN, a LATERAL join "
            "or an ON without an equality on the joined side's columns); a LEFT JOIN ... ON "
            "s.key = ... keeps SQL's NULL (and COALESCE's default) for the rows it does not "
            "find."
            if guessed
            else ""
        )
        out.append(
            f"{'; '.join(said)}: where what it reads is withheld ({where}, its notice says "
            "why), it is withheld too: COALESCE, CASE, IS NULL, NULLIF, GREATEST/LEAST, "
            "CONCAT, an aggregate (COUNT(x), SUM(x), MAX(x)), a window, an array or JSON value "
            "built over it do not put a value in its place (it is unknown, not missing; a NULL "
            "named there may also be SQL's own: a row an outer join did not find, a LAG or "
            f"LEAD past its partition's end).{caveat} {_DO}; drop the COALESCE "
            "(or CASE) to see which values are withheld."
        )
    return (*out, *_tree_clauses(tree, post, texts, data, named, where))


def _tree_clauses(
    tree: exp.Expr,
    post: exp.Select,
    texts: Sequence[str],
    data: Sequence[Sequence[object]],
    named: Callable[[Sequence[int]], str],
    where: str,
) -> list[str]:
    """The words for the outermost block's WHERE/HAVING and ORDER BY reading a withheld value."""
    reads = post.meta.get(CLAUSES) or frozenset()
    out = []
    for k in ("where", "having"):
        written = tree.args.get(k) if isinstance(tree, exp.Select) else None
        if k in reads and written is not None:
            out.append(
                f"{k.upper()} {plain_sql(written.this)}: it reads values withheld in some rows "
                f"({where}): a condition on an unknown value is not true, so SQL leaves those "
                f"rows out; in the data each may pass it. {_DO}."
            )
    order = tree.args.get("order") if isinstance(tree, exp.Select) else None
    if "order" in reads and order is not None:
        by = {plain_sql(o.this) for o in order.expressions}
        cols = [p for p, t in enumerate(texts) if t in by or item_name(post.expressions[p]) in by]
        rows = [r for r, row in enumerate(data) if any(row[p] is None for p in cols)]
        shown = f" ({plural(len(rows), 'row')} shown{named(rows)})" if rows else ""
        limited = post.args.get("limit") or post.args.get("offset")
        out.append(
            f"ORDER BY {plain_sql(order).removeprefix('ORDER BY ')}: the rows whose sort value "
            f"is withheld{shown} stand where PostgreSQL puts NULLs (last ascending, first "
            "descending, unless NULLS FIRST/LAST says otherwise), not where their data would"
            + ("; which rows the LIMIT keeps rests on withheld values" if limited else "")
            + f" ({where}). {_DO}."
        )
    return out
