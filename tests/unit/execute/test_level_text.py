"""The level an accuracy notice states (dpsql.execute.accuracy_words.level_text): never rounded
to a level it is not. Deterministic. The old format ('{:.0%}') printed 0.998 as '100%', a claim
of certainty; it is the broken twin the checks catch."""

from __future__ import annotations

import pytest

from dpsql.execute.accuracy_words import level_text

CASES = [
    (0.95, "95%"),
    (0.998, "99.8%"),
    (0.9, "90%"),
    (0.9999, "99.99%"),
    (0.9999999, "99.99999%"),
]


@pytest.mark.parametrize(("level", "text"), CASES)
def test_the_level_is_printed_as_it_is(level: float, text: str) -> None:
    assert level_text(level) == text


def test_the_old_format_rounds_to_certainty() -> None:
    wrong = [t for level, t in CASES if f"{level:.0%}" != t]
    assert wrong == ["99.8%", "99.99%", "99.99999%"]
