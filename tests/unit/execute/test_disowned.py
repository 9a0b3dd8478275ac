"""Which interval columns a disowning makes NULL (dpsql.execute.disowned, issue 16):
deterministic, no noise. A disowned interval keeps only the end its notice still stands by
(an infinite other end, a NULL column); two disownings of one statistic keep an end only where
both keep it; a stored release without half-widths rounds as before (its intervals')."""

from __future__ import annotations

import json
import math

from dpsql.execute.disowned import Disown, owned
from dpsql.execute.noise import Release
from dpsql.execute.repeat_keys import payload
from dpsql.execute.tree_rounding import half_widths

IV = (10.0, 30.0)


def test_each_keep_leaves_its_end() -> None:
    assert owned({0: Disown(None, "none")}, 3, 0, IV) is None
    assert owned({0: Disown(None, "low")}, 3, 0, IV) == (10.0, math.inf)
    assert owned({0: Disown(None, "high")}, 3, 0, IV) == (-math.inf, 30.0)
    assert owned({0: Disown(None, "none")}, 3, 1, IV) == IV  # another statistic
    assert owned({0: Disown(frozenset({1}), "low")}, 3, 0, IV) == IV  # another row
    assert owned({0: Disown(frozenset({3}), "low")}, 3, 0, None) is None


def test_merging_keeps_an_end_only_where_both_keep_it() -> None:
    some = Disown(frozenset({1, 2}), "low")
    assert some.merged(Disown(frozenset({5}), "low")) == Disown(frozenset({1, 2, 5}), "low")
    assert some.merged(Disown(None, "low")) == Disown(None, "low")
    assert some.merged(Disown(None, "none")) == Disown(None, "none")
    assert Disown(None, "low").merged(Disown(None, "high")) == Disown(None, "none")
    assert some.at(1) == "low" and some.at(0) is None


def test_rounding_reads_the_half_widths_the_notice_did_not_change() -> None:
    rel = Release(("text",), [["a"]], [[20.0]], [[(10.0, math.inf)]], half_widths=[[10.0]])
    assert half_widths(rel) == [[10.0]]
    old = Release(("text",), [["a"]], [[20.0]], [[IV]])  # stored before half_widths existed
    assert half_widths(old) == [[10.0]]
    # stored for free repeats as JSON (dpsql.execute.repeat_keys.payload): the infinite end too
    assert Release.from_json(json.loads(payload(rel))) == rel


def test_the_end_that_stays_is_said_to_hold_at_its_level_not_always() -> None:
    """newcomer27 #11: "the truth is at or above _low (that end holds however much they changed
    it)" read as a guarantee beside a _low above the truth (a 0.5% noise tail): the words say
    the end holds at the stated level, and can miss by chance as any interval end can."""
    from dpsql.demo import POLICY
    from dpsql.execute.disowned import nulled
    from dpsql.policy import load_policy
    from dpsql.sql.analyze import analyze
    from dpsql.sql.parse import parse_statement

    tree = parse_statement("SELECT COUNT(*) FROM purchases").tree
    assert tree is not None
    text = nulled(analyze(tree, load_policy(POLICY)), Disown(None, "low"))
    assert "its _low column still holds at the stated level" in text, text
    assert "it can still miss by chance, at most as often as the level allows" in text, text
