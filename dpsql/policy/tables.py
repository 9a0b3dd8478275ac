"""The policy's private tables: who the privacy unit is, each column's type and declared bounds,
keys and contribution bounds (:class:`PrivateTable`, :class:`Column`).

Sensitivity is derived from these declarations only, never from the data. Models are frozen and
reject unknown fields (:class:`StrictModel`), so a typo in the YAML is an error rather than a
silently ignored setting. The policy as a whole is :mod:`dpsql.policy.model`.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

TypeFamily = Literal["integer", "numeric", "boolean", "text", "date", "timestamp"]
Auto = Literal["auto"]
"""A contribution bound chosen per query from the data, privately (docs/accuracy.md)."""

_TYPE_FAMILIES: dict[str, TypeFamily] = {
    **dict.fromkeys(["int", "integer", "int4", "int2", "int8", "smallint", "bigint"], "integer"),
    # the DDL shorthands for an integer column with a sequence default (PostgreSQL's column is
    # smallint / integer / bigint): a policy copied from a CREATE TABLE may say them
    **dict.fromkeys(
        ["smallserial", "serial2", "serial", "serial4", "bigserial", "serial8"], "integer"
    ),
    **dict.fromkeys(
        ["numeric", "decimal", "real", "float", "float4", "float8", "double", "double precision"],
        "numeric",
    ),
    **dict.fromkeys(["bool", "boolean"], "boolean"),
    **dict.fromkeys(["text", "varchar", "string", "char", "character varying", "uuid"], "text"),
    "date": "date",
    **dict.fromkeys(["timestamp", "timestamptz", "timestamp with time zone"], "timestamp"),
}

INTEGER_BITS: dict[str, int] = {
    **dict.fromkeys(("smallint", "int2", "smallserial", "serial2"), 16),
    **dict.fromkeys(("int", "integer", "int4", "serial", "serial4"), 32),
    **dict.fromkeys(("bigint", "int8", "bigserial", "serial8"), 64),
}
"""An integer type name's width: a serial's is its column's (bigserial is a bigint)."""
_PG_INTEGER_NAMES = {16: "smallint", 32: "integer", 64: "bigint"}

MAX_ROWS_PER_UNIT = 1_000_000
MAX_GROUPS_PER_UNIT = 100_000

Bounds = tuple[float, float] | tuple[date, date] | tuple[datetime, datetime]
EPOCH = date(1970, 1, 1)


def epoch_number(v: float | date) -> Fraction:
    """A bound as a number: itself; a date as days since 1970-01-01; a timestamp as seconds
    since 1970-01-01 00:00 UTC (a naive one read as UTC).

    >>> epoch_number(date(1970, 1, 11)), epoch_number(datetime(1970, 1, 1, 0, 1))
    (Fraction(10, 1), Fraction(60, 1))
    """
    if isinstance(v, datetime):
        aware = v if v.tzinfo is not None else v.replace(tzinfo=UTC)
        delta = aware - datetime(1970, 1, 1, tzinfo=UTC)
        return Fraction(delta.days * 86400 + delta.seconds) + Fraction(delta.microseconds, 10**6)
    if isinstance(v, date):
        return Fraction((v - EPOCH).days)
    return Fraction(v)


class StrictModel(BaseModel):
    """A frozen model that rejects unknown fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Column(StrictModel):
    """One column of a private table."""

    type: str = Field(description="SQL type: integer, numeric, boolean, text, date, timestamp")
    bounds: tuple[float, float] | tuple[date, date] | tuple[datetime, datetime] | None = Field(
        default=None,
        description="[lo, hi]: values are clamped into this range before summing; for date and "
        "timestamp columns two dates or timestamps (MIN/MAX/percentiles, date_trunc keys)",
    )
    keys: tuple[str | int | float | bool, ...] | None = Field(
        default=None, description="the public list of values this column may take (GROUP BY keys)"
    )
    keys_from: str | None = Field(
        default=None, description="schema.table.column of a public table listing the keys"
    )
    identifier: bool = Field(
        default=False, description="never output, grouped on or compared by equality"
    )
    nullable: bool = True
    clamp: Literal["auto", "bounds"] = Field(
        default="auto",
        description="auto: sums and averages clamp values into a range chosen per query from "
        "the data (privately, inside the declared bounds); bounds: into the declared bounds",
    )

    @field_validator("type")
    @classmethod
    def _known_type(cls, v: str) -> str:
        key = v.strip().lower()
        if key not in _TYPE_FAMILIES:
            raise ValueError(
                f"unknown type {v!r}; use one of integer, numeric, boolean, text, date, timestamp"
            )
        return key

    @field_validator("bounds")
    @classmethod
    def _ordered(cls, v: Bounds | None) -> Bounds | None:
        if v is not None and isinstance(v[0], date):
            a, b = v
            naive = [getattr(x, "tzinfo", None) is None for x in v]
            if type(a) is not type(b) or naive[0] != naive[1]:
                raise ValueError(
                    "bounds must be two numbers, two dates or two timestamps (both with a time "
                    "zone or both without)"
                )
            ordered = a <= b
            if not ordered:
                raise ValueError(f"bounds are out of order: write [{v[1]}, {v[0]}]")
            return v
        if v is not None:
            lo, hi = v
            if (
                not (lo == lo and hi == hi)
                or lo in (float("inf"), float("-inf"))
                or hi
                in (
                    float("inf"),
                    float("-inf"),
                )
            ):
                raise ValueError("bounds must be finite numbers")
            if lo > hi:
                raise ValueError(f"bounds are out of order: write [{hi}, {lo}]")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Column:
        if self.keys is not None and self.keys_from is not None:
            raise ValueError("give either keys or keys_from, not both")
        if self.identifier and (self.bounds or self.keys or self.keys_from):
            raise ValueError("an identifier column can't have bounds or keys")
        if self.bounds is not None:
            temporal = isinstance(self.bounds[0], date)
            if self.family in ("integer", "numeric") and temporal:
                raise ValueError(f"bounds of a {self.type} column are numbers, not dates")
            if self.family == "date" and isinstance(self.bounds[0], datetime):
                raise ValueError("bounds of a date column are dates, without a time of day")
            if self.family in ("date", "timestamp") and not temporal:
                raise ValueError(
                    f"bounds of a {self.type} column are two dates, e.g. [2020-01-01, 2025-12-31]"
                )
            if self.family not in ("integer", "numeric", "date", "timestamp"):
                raise ValueError(f"bounds only apply to numeric and date columns, not {self.type}")
        if self.keys is not None:
            # one key listed twice would be released twice, each with its own noise: its
            # group's units would pay twice the statement's epsilon, charged once
            texts = self.key_texts or ()
            twice = [k for i, k in enumerate(texts) if k in texts[:i]]
            if twice:
                raise ValueError(f"key {twice[0]!r} is listed twice: list each key once")
        if self.keys is not None and self.family in ("integer", "numeric"):
            # two keys of one value (1 and 1.0) would be one group upstream, printed as the text
            # of whichever row PostgreSQL kept: a choice of the data (dpsql.execute.key_texts)
            seen: dict[Decimal, str] = {}
            for k in self.key_texts or ():
                try:
                    v = Decimal(k)
                except InvalidOperation:
                    continue
                if v in seen and seen[v] != k:
                    raise ValueError(f"keys {seen[v]} and {k} are the same number: list it once")
                seen.setdefault(v, k)
        return self

    @property
    def family(self) -> TypeFamily:
        return _TYPE_FAMILIES[self.type]

    @property
    def integer_bits(self) -> int | None:
        """The width of an integer column's type (16, 32, 64), None for other families."""
        return INTEGER_BITS[self.type] if self.family == "integer" else None

    def width_mismatch(self, upstream: str) -> str | None:
        """Words for an integer column declared with another width than the database's
        (``format_type`` / information_schema name: smallint, integer, bigint), else None.
        Result types and the int4 overflow check follow the declared width: a bigserial id
        declared ``integer`` would get SUM(id) as bigint where PostgreSQL's is numeric.

        >>> Column(type="integer").width_mismatch("bigint")
        'write type: bigint (the declared type says integer: result types and integer overflow follow it)'
        >>> Column(type="bigserial").width_mismatch("bigint") is None
        True
        """
        bits = self.integer_bits
        pg = {v: k for k, v in _PG_INTEGER_NAMES.items()}.get(upstream)
        if bits is None or pg is None or pg == bits:
            return None
        return (f"write type: {upstream} (the declared type says {_PG_INTEGER_NAMES[bits]}: "
                "result types and integer overflow follow it)")  # fmt: skip

    @property
    def key_texts(self) -> tuple[str, ...] | None:
        """The declared ``keys`` as PostgreSQL prints them (``col::text``, what key filters
        compare), None without a list.

        >>> Column(type="boolean", keys=(True, False)).key_texts
        ('true', 'false')
        """
        if self.keys is None:
            return None
        return tuple(
            ("true" if k else "false") if isinstance(k, bool) else str(k) for k in self.keys
        )

    @property
    def temporal(self) -> bool:
        """True for a date or timestamp column (its bounds are dates or timestamps)."""
        return self.family in ("date", "timestamp")

    @property
    def lo(self) -> Fraction:
        """The lower bound as a number: dates as days and timestamps as seconds since
        1970-01-01 (UTC for a timestamp without time zone)."""
        assert self.bounds is not None
        return self._number(self.bounds[0])

    @property
    def hi(self) -> Fraction:
        assert self.bounds is not None
        return self._number(self.bounds[1])

    def _number(self, v: float | date) -> Fraction:
        if self.family == "timestamp" and type(v) is date:  # midnight (UTC)
            v = datetime(v.year, v.month, v.day)
        return epoch_number(v)


class PrivateTable(StrictModel):
    """A table whose rows belong to privacy units and are never released raw."""

    privacy_unit: str = Field(description="the column identifying one person, or 'row'")
    max_rows_per_unit: Annotated[int, Field(ge=1, le=MAX_ROWS_PER_UNIT)] | Auto = Field(
        default="auto",
        description="rows of one unit kept per group; auto: chosen per query from the data",
    )
    max_groups_per_unit: Annotated[int, Field(ge=1, le=MAX_GROUPS_PER_UNIT)] | Auto = Field(
        default="auto",
        description="groups one unit may touch; auto: chosen per query from the data",
    )
    max_rows_per_unit_total: Annotated[int, Field(ge=1, le=MAX_ROWS_PER_UNIT)] | None = Field(
        default=None,
        description="rows of one unit kept in all (over all groups of a query): per-group COUNT"
        " and SUM then move by at most this many rows of one unit over all its groups (an L1"
        " cap, the shape auto chooses from the data), declared instead of chosen: nothing is"
        " spent choosing it; auto R and G are then at most this, free",
    )
    auto_max_rows_per_unit: Annotated[int, Field(ge=1, le=MAX_ROWS_PER_UNIT)] = Field(
        default=MAX_ROWS_PER_UNIT,
        description="the largest max_rows_per_unit auto may choose (the top of its public grid of"
        " candidates; a lower one, when no unit can have more rows, makes the choice sharper)",
    )
    auto_max_groups_per_unit: Annotated[int, Field(ge=1, le=MAX_GROUPS_PER_UNIT)] = Field(
        default=MAX_GROUPS_PER_UNIT,
        description="the largest max_groups_per_unit auto may choose (the top of its grid)",
    )
    columns: dict[str, Column]

    @property
    def row_privacy(self) -> bool:
        return self.privacy_unit == "row"

    @property
    def auto_rows(self) -> bool:
        """True when R is chosen per query (never with ``privacy_unit: row``: R = 1 there)."""
        return self.max_rows_per_unit == "auto" and not self.row_privacy

    @property
    def auto_groups(self) -> bool:
        """True when G is chosen per query (never with ``privacy_unit: row``: a row is in one
        group)."""
        return self.max_groups_per_unit == "auto" and not self.row_privacy

    @property
    def rows_bound(self) -> int:
        """R as a number: the fixed one, or 1 while ``auto`` is not chosen (today's default;
        any R used by both the rewrite and the plan is sound, auto only changes accuracy)."""
        r = self.max_rows_per_unit
        return r if isinstance(r, int) else 1

    @property
    def groups_bound(self) -> int:
        """G as a number: the fixed one, or 1 while ``auto`` is not chosen."""
        g = self.max_groups_per_unit
        return g if isinstance(g, int) else 1

    @model_validator(mode="after")
    def _total_covers_the_rest(self) -> PrivateTable:
        n = self.max_rows_per_unit_total
        if n is None:
            return self
        r = self.max_rows_per_unit
        if isinstance(r, int) and r > n:
            raise ValueError(
                f"max_rows_per_unit ({r}) is more than max_rows_per_unit_total ({n}): a unit "
                "cannot have more rows in one group than in all; lower max_rows_per_unit to at "
                f"most {n} (or leave it auto)"
            )
        return self

    @model_validator(mode="after")
    def _unit_is_a_column(self) -> PrivateTable:
        if self.row_privacy:
            if self.max_rows_per_unit not in (1, "auto"):
                raise ValueError("with privacy_unit: row, max_rows_per_unit must be 1")
            if self.max_rows_per_unit_total not in (None, 1):
                raise ValueError("with privacy_unit: row, max_rows_per_unit_total must be 1")
        elif self.privacy_unit not in self.columns:
            raise ValueError(
                f"privacy_unit {self.privacy_unit!r} is not among the columns; declare it "
                "(as identifier: true)"
            )
        return self

    def column(self, name: str) -> Column | None:
        return self.columns.get(name)
