"""The words of a tree statement's ``_low``/``_high`` columns (:mod:`dpsql.execute.tree_intervals`):
why a column has no interval, why a row's interval is NULL, and what an interval is computed
from and holds with."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from dpsql.execute.noise import Release
from dpsql.sql.interval_sql import ENDS, Held, No
from dpsql.sql.tree_intervals import OutCol


def why_not(o: OutCol, hidden: dict[str, list[int]]) -> str:
    """Why output column ``o`` has no interval ("" when it has one)."""
    if isinstance(o.info, No):
        return o.info.reason or "dpsql can't bound it"
    h = o.info
    if any(len(hidden.get(f"_dpsql_iv{h.hid}_{e}", [])) != 1 for e in ENDS):
        return "the statement repeats the column it comes from (SELECT * over a self-join)"
    return ""


def short_of(
    h: Held,
    miss: Decimal,
    releases: Sequence[Release | None],
    labels: Sequence[str],
    confidence: float,
) -> str:
    """Why a row's interval is NULL: the leaf intervals it read hold together with probability
    below the session's confidence (a stored leaf answer keeps the level it was released at)."""
    level = max(float(1 - miss), 0.0)
    read = sorted({e[0] for e in h.events})
    levels = {i: (r.confidence or 0.0) if (r := releases[i]) is not None else 0.0 for i in read}
    low = min(levels.values())
    # the stored answers held at the lowest level fall short (not merely the first one read)
    names = [labels[i] for i in read if levels[i] == low]
    who = (
        f"a stored answer of {names[0]} keeps its intervals"
        if len(names) == 1
        else f"the stored answers of {', '.join(names[:-1])} and {names[-1]} keep their intervals"
    )
    return (
        f"it is computed from released values whose intervals all hold with probability "
        f"only {level:.4g} ({who} at {low:.4g}; at {confidence:g} the values a row reads, k of "
        f"them, would each need 1 - {1 - confidence:.2g}/k): ask with another dpsql.epsilon to "
        "measure it anew"
    )


def what_of(
    o: Held | No,
    labels: Sequence[str],
    releases: Sequence[Release | None],
    ks: dict[int, int | None],
    confidence: float,
) -> str:
    """What the held interval ``o`` is computed from, and the probability it holds with."""
    assert isinstance(o, Held)
    leaves = sorted({leaf for leaf, _ in o.events})
    if o.passthrough:

        def level(i: int) -> float:
            rel = releases[i]
            return rel.confidence if rel is not None and rel.confidence is not None else confidence

        if len(leaves) == 1:
            return (
                f"the interval of {labels[leaves[0]]}'s released value, unchanged (at "
                f"{level(leaves[0]):.4g})"
            )
        # UNION ALL of parts: each row's interval is its own part's (named, every one)
        parts = "; ".join(f"{labels[i]} at {level(i):.4g}" for i in leaves)
        return (
            "the interval of the released value each row comes from, unchanged, at the level of "
            f"its part ({parts})"
        )
    k = ks.get(o.hid)
    many = f"up to {k}" if k else "the"
    lv = ", ".join(
        f"{labels[i]} at {releases[i].confidence:.4g}"  # type: ignore[union-attr]
        for i in leaves
    )
    return (
        f"computed from {many} released values a row reads, by interval arithmetic ({lv}): it "
        f"holds the true value with probability >= {confidence:g} (union bound over {'the ' + str(k) if k else 'them'})"
    )
