"""width_bucket's key domain is counted before it is made (dpsql.sql.width_bucket.Buckets.keys).

``GROUP BY width_bucket(amount, 0, 500, 2147483646)`` built a tuple of every bucket the bounds
allow, two billion keys, while the statement was prepared: the proxy's process grew past 17 GB
and the kernel killed it (review24, measured on bi24's branch). More than MAX_KEYS buckets is
TooMany now, before any key is made: the key's groups are then chosen from the data (partition
selection), as for any derived key with too long a domain.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import sqlglot

from dpsql.policy.load import parse_policy
from dpsql.sql.analyze import analyze
from dpsql.sql.date_domain import MAX_KEYS
from dpsql.sql.key_values import TooMany
from dpsql.sql.width_bucket import Buckets

POLICY = parse_policy(
    """
version: 1
tables:
  public.e:
    privacy_unit: row
    columns:
      v: {type: numeric, bounds: [0, 100]}
"""
)


def test_more_buckets_than_the_limit_are_too_many_before_any_is_made() -> None:
    lo, hi = Fraction(0), Fraction(100)
    assert Buckets(lo, hi, MAX_KEYS - 1, False).keys(lo, hi) == tuple(range(1, MAX_KEYS + 1))
    with pytest.raises(TooMany, match="above the limit"):
        Buckets(lo, hi, MAX_KEYS, False).keys(lo, hi)  # buckets 1 .. MAX_KEYS + 1


@pytest.mark.parametrize(("count", "selected"), [(10, False), (10**6, True)])
def test_a_group_by_of_too_many_buckets_selects_its_groups(count: int, selected: bool) -> None:
    sql = f"SELECT COUNT(*) FROM e GROUP BY width_bucket(v, 0, 100, {count})"
    assert analyze(sqlglot.parse_one(sql, read="postgres"), POLICY).needs_selection is selected
