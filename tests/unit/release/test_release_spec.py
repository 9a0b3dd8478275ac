"""Release axes from the policy: keys, bins over bounds, and the refusals (no database)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpsql.errors import InvalidParameter, PrivacyViolation, UndefinedColumn, UndefinedTable
from dpsql.policy import parse_policy
from dpsql.release.spec import Axis, check_epsilon, parse_bins, resolve_source

POLICY = parse_policy(
    """
tables:
  people:
    privacy_unit: pid
    max_rows_per_unit: 2
    max_groups_per_unit: 3
    columns:
      pid: {type: integer, identifier: true}
      age: {type: integer, bounds: [0, 99]}
      income: {type: numeric, bounds: [0, 1000]}
      sex: {type: text, keys: [F, M]}
      flag: {type: boolean}
      region: {type: text, keys_from: public.regions.code}
      note: {type: text}
      born: {type: date}
      kids: {type: integer}
public_tables: [regions]
"""
)


def _src(cols, bins=None):  # type: ignore[no-untyped-def]
    return resolve_source(POLICY, "people", cols, bins, lambda ref: ("C", "N"))


def test_axes_from_keys_bounds_booleans_and_keys_from() -> None:
    src = _src(["sex", "age", "income", "flag", "region"])
    sex, age, income, flag, region = src.axes
    assert sex.keys == ("F", "M") and flag.keys == ("false", "true") and region.keys == ("C", "N")
    assert age.edges == tuple(float(x) for x in range(0, 101, 10))  # integers 0..99: 10 bins of 10
    assert income.size == 10 and income.edges[0] == 0 and income.edges[-1] == 1000
    assert src.shape == (2, 10, 10, 2, 2) and src.cells == 800
    assert age.values()[0] == 4 and income.values()[0] == 50.0 and flag.values() == [False, True]


def test_bins_width_and_edges() -> None:
    src = _src(["age", "income"], parse_bins(["age=25", "income=0,100,1000"]))
    assert src.axes[0].edges == (0.0, 25.0, 50.0, 75.0, 100.0)
    assert src.axes[1].labels == ("[0, 100)", "[100, 1000)")


def test_index_sql_quotes_everything() -> None:
    a = Axis('we"ird', "text", keys=("a'b", "c"))
    text = a.index_sql().as_string(None)
    assert '"we""ird"' in text and "a''b" in text
    b = Axis("x", "numeric", edges=(0.0, 1.0, 2.0))
    assert "width_bucket" in b.index_sql().as_string(None)


@pytest.mark.parametrize(
    ("cols", "bins", "err", "match"),
    [
        (["nope"], None, UndefinedColumn, "not declared"),
        (["pid"], None, PrivacyViolation, "identifier"),
        (["note"], None, PrivacyViolation, "no declared keys or bounds"),
        (["born"], None, PrivacyViolation, "no declared keys or bounds"),
        (["kids"], None, PrivacyViolation, "no declared keys or bounds"),
        (["sex"], {"sex": 2.0}, InvalidParameter, "numeric columns"),
        (["age", "age"], None, InvalidParameter, "duplicate"),
        ([], None, InvalidParameter, "no columns"),
        (["age"], {"income": 2.0}, InvalidParameter, "not released"),
        (["income"], {"income": 0.001}, InvalidParameter, "too many"),
    ],
)
def test_refusals(cols, bins, err, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(err, match=match) as e:
        _src(cols, bins)
    assert e.value.hint


def test_unknown_table() -> None:
    with pytest.raises(UndefinedTable) as e:
        resolve_source(POLICY, "regions", ["code"])
    assert e.value.sqlstate == "42P01" and "public.people" in (e.value.hint or "")


@pytest.mark.parametrize("spec", ["age", "age=", "=3", "age=x", "age=-1", "age=3,2", "age=inf"])
def test_bad_bins(spec: str) -> None:
    with pytest.raises(InvalidParameter):
        parse_bins([spec])


@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_epsilon(eps: float) -> None:
    with pytest.raises(InvalidParameter) as e:
        check_epsilon(eps)
    assert e.value.sqlstate == "22023"


def test_bad_delta() -> None:
    with pytest.raises(InvalidParameter):
        check_epsilon(1.0, 1.0)
    assert check_epsilon(0.1, 1e-6) == (Fraction(1, 10), Fraction(1, 10**6))
