"""The offline ``dpsql explain``'s note on what it cannot know without an upstream: bounds
stored by earlier statements (no ledger is read), and the keys of a ``keys_from`` GROUP BY key
(read from their table when the statement runs)."""

from __future__ import annotations

from dpsql.execute.auto_bounds_text import in_terms
from dpsql.sql.analysis import Analysis
from dpsql.sql.auto_bounds import DECLARED_GROUPS_MAX, groups_auto


def offline_note(a: Analysis) -> str:
    """The note the offline plan's auto-bounds line ends with."""
    return f"{OFFLINE}{_unread_keys(a)}"


OFFLINE = (
    "without an upstream no ledger is read: bounds stored by earlier statements are not shown "
    "(EXPLAIN through dpsql serve shows them)"
)


def _unread_keys(a: Analysis) -> str:
    """What a ``keys_from`` GROUP BY key changes that no offline plan can know: the server reads
    the key table's values when the statement runs (dpsql.execute.group_keys.inline_key_tables)
    and, with few of them, takes G as their number, free (and R = 1 for per-group averages over
    4 or more), where this plan, without them, has G and R to choose."""
    unread = [g for g in a.group_keys if g.keys is None and g.keys_from is not None]
    if not unread or a.needs_selection or not groups_auto(a):
        return ""
    names = " and ".join(f"{g.name} (from {g.keys_from})" for g in unread)
    text = (
        f". The keys of {names} are read from their table when the statement runs: with at most "
        f"{DECLARED_GROUPS_MAX} key combinations, groups per unit is their number, set without "
        "the data (free), and an average or spread by 4 or more keeps 1 row per unit in a "
        "group, so the bounds it chooses and their cost's split may differ from this plan's"
    )
    return in_terms(text, a.private.privacy_unit)
