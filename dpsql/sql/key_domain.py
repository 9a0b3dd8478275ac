"""Which values a GROUP BY key can take on the rows a query keeps: its public key domain.

A key's domain is the list of groups dpsql releases (each with noise, whether or not it has rows),
so it must be public: it is computed from the policy (``keys:``, ``keys_from:`` tables of public
data) and the query's text only, never from private rows. This module narrows a declared domain
by the query's WHERE clause, and derives one from the query text where the policy gives none.

**Narrowing** (``WHERE category IN ('books', 'travel') GROUP BY category``): a declared key ``k``
is dropped when, for a row whose key equals ``k``, the WHERE clause can't be true whatever the
row's other columns (:func:`admits`, three-valued logic over the sets of truth values each
condition can take). No row with that key reaches the aggregate, so its group's true value is
empty and PostgreSQL would not return it: releasing it would only show a noisy phantom. Every
condition dpsql can't read exactly (another column, a parameter, ``now()``, a function) can take
any truth value, so it never removes a key.

**Domains from the query text**: ``WHERE k = 'a'`` or ``k IN ('a', 'b')`` (ANDed at the top
level, or ORed together) bounds the values of ``k`` on kept rows, so those literals are a public
domain even when the policy declares none: no partition selection (no threshold, no delta)
is needed. ``CASE`` expressions whose results are all literals take only those values (both in
:mod:`dpsql.sql.key_literals`; a CASE's results the WHERE clause can't reach:
:mod:`dpsql.sql.case_keys`).

Soundness: a domain is always applied upstream as a filter (``CAST(key AS text) IN (...)``,
:func:`dpsql.sql.rewrite.bound_contributions`), so a row whose key text is not in the domain is
dropped before contribution bounding, whatever the reasoning here says: a mistake can make an
answer too small, never release a private value or raise the sensitivity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from functools import cached_property

from sqlglot import exp

from dpsql.policy.tables import TypeFamily
from dpsql.sql.case_keys import case_admits
from dpsql.sql.constants import NULL, Value, parse_date, parse_timestamp
from dpsql.sql.date_domain import unit_end
from dpsql.sql.key_truth import Hypothesis, memoized, truth
from dpsql.sql.nodes import POSTGRES


def key_value(text: str | None, family: TypeFamily) -> Value | None:
    """A key's text (as PostgreSQL prints it) as a comparable value; None if it can't be read."""
    if text is None:
        return NULL
    if family in ("integer", "numeric"):
        try:
            return Fraction(Decimal(text))
        except (InvalidOperation, ValueError):
            return None
    if family == "text":
        return text
    if family == "boolean":
        low = text.lower()
        return low in ("t", "true") if low in ("t", "true", "f", "false") else None
    if family == "date":
        return parse_date(text)
    if family == "timestamp":
        plain = text[:-3] if text.endswith("+00") else text  # timestamptz printed in UTC
        return parse_timestamp(plain)
    return None


@dataclass(frozen=True)
class KeyFilter:
    """Narrows a key's domain by a WHERE clause (for ``keys_from`` domains, read at run time)."""

    key: exp.Expr
    where: exp.Expr
    family: TypeFamily
    base: exp.Expr | None = None  # date_trunc(unit, base)
    unit: str | None = None
    base_is_date: bool = False  # a date base takes whole days only (else microseconds)

    @cached_property
    def _key_sql(self) -> str:
        return self.key.sql(POSTGRES)

    @cached_property
    def _base_sql(self) -> str | None:
        return self.base.sql(POSTGRES) if self.base is not None else None

    def admits(self, text: str | None) -> bool:
        """False only when no row whose key prints as ``text`` can pass the WHERE clause."""
        v = key_value(text, self.family)
        if v is None:
            return True
        lo = hi = None
        if self.unit is not None and isinstance(v, datetime):
            step = timedelta(days=1) if self.base_is_date else timedelta(microseconds=1)
            lo, hi = v, unit_end(v, self.unit) - step
        h = Hypothesis(self._key_sql, v, self._base_sql, lo, hi)
        if "t" not in truth(self.where, h):
            return False
        return case_admits(self.key, text, self.where, h)

    def narrow(self, keys: Sequence[str]) -> tuple[str, ...]:
        with memoized():
            return tuple(k for k in keys if self.admits(k))
