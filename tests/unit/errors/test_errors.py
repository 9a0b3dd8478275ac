"""dpsql.errors: one class per SQLSTATE, each under its family's class, found by lookup()."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpsql import errors
from dpsql.errors import DpsqlError, lookup


def _classes() -> list[type[DpsqlError]]:
    return sorted(
        {
            c
            for c in vars(errors).values()
            if isinstance(c, type)
            and issubclass(c, DpsqlError)
            and c is not DpsqlError
            and "sqlstate" in c.__dict__
        },
        key=lambda c: c.sqlstate,
    )


def test_every_code_has_one_class_found_by_lookup() -> None:
    classes = _classes()
    assert len(classes) > 40
    codes = [c.sqlstate for c in classes]
    assert len(codes) == len(set(codes)), "two classes claim one SQLSTATE"
    for c in classes:
        assert re.fullmatch(r"[0-9A-Z]{5}", c.sqlstate)
        assert lookup(c.sqlstate) is c


@pytest.mark.parametrize("cls", _classes(), ids=lambda c: c.__name__)
def test_each_class_is_under_its_family(cls: type[DpsqlError]) -> None:
    family = lookup(cls.sqlstate[:2] + "000")
    assert family is not DpsqlError, f"no family class for {cls.sqlstate}"
    assert issubclass(cls, family)


def test_lookup_falls_back_to_the_family_then_the_base() -> None:
    assert lookup("22008") is errors.DataException  # datetime_field_overflow: no class of its own
    assert lookup("42P06") is errors.SyntaxErrorOrAccessRuleViolation  # duplicate_schema
    assert lookup("P0001") is DpsqlError
    e = lookup("25P01")("SAVEPOINT can only be used in transaction blocks")
    assert (e.sqlstate, e.fields()["C"]) == ("25P01", "25P01")


def test_code_raises_classes_not_hand_made_sqlstates() -> None:
    """No module but dpsql.errors writes a SQLSTATE: ``DpsqlError(..., sqlstate="...")``, a
    ``state = "58000"`` handed to one, a notice's code. They raise (or name) the class;
    ``sqlstate=`` passes on only a code PostgreSQL sent."""
    package = Path(errors.__file__).parent.parent  # dpsql/ (errors is a package of it)
    made = re.compile(r"""(sqlstate|state|code)\s*=\s*b?["'][0-9A-Z]{5}["']|_warning\(["']""")
    offenders = [
        f"{p.relative_to(package.parent)}:{n}"
        for p in sorted(package.rglob("*.py"))
        if p != Path(errors.__file__)
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if made.search(line)
    ]
    assert offenders == []
