"""The policy: which tables are private, who the privacy unit is, each column's declared bounds.

Sensitivity is derived from these declarations only, never from the data. Models are frozen and
reject unknown fields, so a typo in the YAML is an error rather than a silently ignored setting.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from fnmatch import fnmatchcase
from fractions import Fraction
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dpsql.policy.settings import ServerSettings, Timing

TypeFamily = Literal["integer", "numeric", "boolean", "text", "date", "timestamp"]
Auto = Literal["auto"]
"""A contribution bound chosen per query from the data, privately (docs/accuracy.md)."""

_TYPE_FAMILIES: dict[str, TypeFamily] = {
    **dict.fromkeys(["int", "integer", "int4", "int2", "int8", "smallint", "bigint"], "integer"),
    **dict.fromkeys(
        ["numeric", "decimal", "real", "float", "float4", "float8", "double", "double precision"],
        "numeric",
    ),
    **dict.fromkeys(["bool", "boolean"], "boolean"),
    **dict.fromkeys(["text", "varchar", "string", "char", "character varying", "uuid"], "text"),
    "date": "date",
    **dict.fromkeys(["timestamp", "timestamptz", "timestamp with time zone"], "timestamp"),
}


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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Column(_Strict):
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
        return self

    @property
    def family(self) -> TypeFamily:
        return _TYPE_FAMILIES[self.type]

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


class PrivateTable(_Strict):
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
    def _unit_is_a_column(self) -> PrivateTable:
        if self.row_privacy:
            if self.max_rows_per_unit not in (1, "auto"):
                raise ValueError("with privacy_unit: row, max_rows_per_unit must be 1")
        elif self.privacy_unit not in self.columns:
            raise ValueError(
                f"privacy_unit {self.privacy_unit!r} is not among the columns; declare it "
                "(as identifier: true)"
            )
        return self

    def column(self, name: str) -> Column | None:
        return self.columns.get(name)


class Budget(_Strict):
    epsilon: Annotated[float, Field(gt=0)]
    delta: Annotated[float, Field(ge=0, lt=1)] = 0.0
    period: Literal["none", "day", "week", "month", "year"] = "none"
    renyi_order: Annotated[float, Field(gt=1)] | None = Field(
        default=None,
        description="the Renyi order of this budget's privacy filter (default: chosen from epsilon"
        " and delta); fixed for a period once it is used (see docs/budget.md)",
    )
    explicit_delta_share: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.5,
        description="the share of delta that releases may spend explicitly (partition "
        "selection); the rest converts Gaussian (zCDP) spending to (epsilon, delta)",
    )


# The session settings dpsql itself defines (SET / SHOW / options / an analyst's settings).
DPSQL_SETTINGS = ("dpsql.epsilon", "dpsql.delta", "dpsql.mechanism", "dpsql.confidence",
                  "dpsql.show_intervals")  # fmt: skip


def _setting_text(x: object) -> str:
    """A YAML scalar as the setting's text (true -> on, 0.5 -> 0.5)."""
    if isinstance(x, bool):
        return "on" if x else "off"
    return str(x)


class Analyst(_Strict):
    """Someone who may query, with a SCRAM verifier (never a plaintext password)."""

    credential: str | None = Field(
        default=None, description="SCRAM-SHA-256 verifier, as stored in pg_authid"
    )
    budget: Budget
    default_epsilon: Annotated[float, Field(gt=0)] | None = None
    max_epsilon: Annotated[float, Field(gt=0)] | None = None
    min_epsilon: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="the smallest per-query epsilon (default: defaults.min_epsilon)"
    )
    default_delta: Annotated[float, Field(ge=0, lt=1)] | None = None
    settings: dict[str, str] = Field(
        default_factory=dict,
        description="session settings this analyst's connections start with (dpsql.confidence, "
        "dpsql.show_intervals, dpsql.mechanism ... or PostgreSQL's), for tools that can send "
        "neither SET nor options; a client's options and SET override them",
    )
    tables: tuple[str, ...] | None = Field(
        default=None,
        description="the policy tables this analyst may use: schema.table names or patterns "
        "(sales.*, *.orders; unqualified names are in public); default: every table of the policy",
    )
    deny: tuple[str, ...] = Field(
        default=(), description="names or patterns taken away from `tables` (deny wins)"
    )

    @field_validator("settings", mode="before")
    @classmethod
    def _settings(cls, v: object) -> object:
        if isinstance(v, dict):
            v = {str(k): _setting_text(x) for k, x in v.items()}
            unknown = [k for k in v if k.lower().startswith("dpsql.") and k.lower() not in
                       DPSQL_SETTINGS]  # fmt: skip
            if unknown:
                raise ValueError(f"unknown dpsql setting {unknown[0]}: use one of "
                                 + ", ".join(DPSQL_SETTINGS))  # fmt: skip
        return v

    @field_validator("tables", "deny")
    @classmethod
    def _patterns(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if v is None else tuple(qualify_name(p) for p in v)

    def may_use(self, qualified: str) -> bool:
        """True when the (qualified, lower-case) table is allowed and not denied.

        >>> Analyst(budget=Budget(epsilon=1), tables=("sales.*",), deny=("sales.pay",)).may_use(
        ...     "sales.orders")
        True
        """
        if any(fnmatchcase(qualified, p) for p in self.deny):
            return False
        return self.tables is None or any(fnmatchcase(qualified, p) for p in self.tables)

    @property
    def restricted(self) -> bool:
        return self.tables is not None or bool(self.deny)

    @field_validator("credential")
    @classmethod
    def _verifier(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("SCRAM-SHA-256$"):
            raise ValueError(
                "credential must be a SCRAM-SHA-256 verifier (SCRAM-SHA-256$<iter>:<salt>$...); "
                "make one with `dpsql verifier NAME`"
            )
        return v


class Defaults(_Strict):
    epsilon: Annotated[float, Field(gt=0)] = 1.0
    max_epsilon: Annotated[float, Field(gt=0)] = 10.0
    min_epsilon: Annotated[float, Field(gt=0)] = Field(
        default=0.001,
        description="the smallest per-query epsilon: a near-free query would still run the "
        "private SQL, a nearly free timing sample (docs/timing.md)",
    )
    delta: Annotated[float, Field(ge=0, lt=1)] = 1e-6
    confidence: Annotated[float, Field(gt=0, lt=1)] = 0.95
    statement_timeout_ms: Annotated[int, Field(ge=100)] = 30_000

    @model_validator(mode="after")
    def _epsilon_range(self) -> Defaults:
        if not self.min_epsilon <= self.epsilon <= self.max_epsilon:
            raise ValueError(
                f"defaults: epsilon {self.epsilon:g} must lie between min_epsilon "
                f"{self.min_epsilon:g} and max_epsilon {self.max_epsilon:g}"
            )
        return self


class Policy(_Strict):
    """The whole policy file."""

    version: Literal[1] = 1
    dataset: str = "default"
    defaults: Defaults = Defaults()
    tables: dict[str, PrivateTable] = Field(default_factory=dict)
    public_tables: tuple[str, ...] = ()
    analysts: dict[str, Analyst] = Field(default_factory=dict)
    budget: Budget | None = Field(default=None, description="the dataset's global budget")
    repeats: Literal["analyst", "global", "off"] = Field(
        default="analyst",
        description="free repeats of a stored noisy answer: to the analyst who paid for it, to "
        "every analyst of the dataset (global), or never (off: every query is charged)",
    )
    timing: Timing = Field(
        default_factory=Timing,
        exclude=True,  # changes when answers arrive, never what they are: not in the digest
        description="padding of answers over private tables (docs/timing.md)",
    )
    server: ServerSettings | None = Field(
        default=None,
        exclude=True,  # deployment only: not in the digest
        description="`dpsql serve` settings (flags and environment variables override them)",
    )

    @field_validator("tables")
    @classmethod
    def _qualified(cls, v: dict[str, PrivateTable]) -> dict[str, PrivateTable]:
        return {qualify_name(k): t for k, t in v.items()}

    @field_validator("public_tables")
    @classmethod
    def _qualified_public(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(qualify_name(k) for k in v)

    @model_validator(mode="after")
    def _disjoint(self) -> Policy:
        both = set(self.tables) & set(self.public_tables)
        if both:
            raise ValueError(f"tables declared both private and public: {sorted(both)}")
        return self

    @model_validator(mode="after")
    def _analyst_min_epsilon(self) -> Policy:
        """An analyst's minimum per-query epsilon is at most its default and its maximum."""
        for name in self.analysts:
            lo, default, hi = self.epsilon_range(name)
            for field, v in (("default_epsilon", default), ("max_epsilon", hi)):
                if v < lo:
                    raise ValueError(
                        f"analysts.{name}: {field} {v:g} is below the minimum per-query epsilon "
                        f"{lo:g} (min_epsilon): every query would be refused"
                    )
        return self

    @field_validator("analysts")
    @classmethod
    def _analyst_tables_exist(
        cls, v: dict[str, Analyst], info: ValidationInfo
    ) -> dict[str, Analyst]:
        """Every name or pattern in an analyst's tables:/deny: matches a table of the policy."""
        known = set(info.data.get("tables") or {}) | set(info.data.get("public_tables") or ())
        for name, analyst in v.items():
            for field, patterns in (("tables", analyst.tables or ()), ("deny", analyst.deny)):
                for p in patterns:
                    if not any(fnmatchcase(t, p) for t in known):
                        raise ValueError(
                            f"analysts.{name}.{field}: {p} matches no table of the policy "
                            "(list private tables under tables: and public ones under "
                            "public_tables:)"
                        )
        return v

    def for_analyst(self, analyst: str) -> Policy:
        """The policy as ``analyst`` sees it: the tables it may not use are left out, so they
        behave exactly like tables that do not exist. An analyst not declared in the policy (the
        CLI's default) and one without ``tables``/``deny`` see the whole policy."""
        a = self.analysts.get(analyst)
        if a is None or not a.restricted:
            return self
        known = set(self.tables) | set(self.public_tables)

        def denied(ref: str | None) -> bool:
            table = keys_from_table(ref) if ref else None
            return table is not None and table in known and not a.may_use(table)

        def keys_visible(t: PrivateTable) -> PrivateTable:
            # keys_from a table the analyst may not use: its values would be released as group
            # keys (a read of the denied table), so for this analyst the column has no public
            # key source and GROUP BY on it goes through partition selection
            if not any(denied(c.keys_from) for c in t.columns.values()):
                return t
            cols = {
                n: c.model_copy(update={"keys_from": None}) if denied(c.keys_from) else c
                for n, c in t.columns.items()
            }
            return t.model_copy(update={"columns": cols})

        return self.model_copy(
            update={
                "tables": {k: keys_visible(t) for k, t in self.tables.items() if a.may_use(k)},
                "public_tables": tuple(t for t in self.public_tables if a.may_use(t)),
            }
        )

    def epsilon_range(self, analyst: str) -> tuple[float, float, float]:
        """``analyst``'s per-query (min_epsilon, default epsilon, max_epsilon): its own values
        where set, else the policy defaults (an undeclared analyst gets the defaults)."""
        d, a = self.defaults, self.analysts.get(analyst)
        if a is None:
            return d.min_epsilon, d.epsilon, d.max_epsilon
        return (
            a.min_epsilon or d.min_epsilon,
            a.default_epsilon or d.epsilon,
            a.max_epsilon or d.max_epsilon,
        )

    def may_use(self, analyst: str, qualified: str) -> bool:
        """True when ``analyst`` may use the policy table ``qualified``."""
        a = self.analysts.get(analyst)
        known = qualified in self.tables or qualified in self.public_tables
        return known and (a is None or a.may_use(qualified))

    def private_table(self, qualified: str) -> PrivateTable | None:
        return self.tables.get(qualified)

    def is_public(self, qualified: str) -> bool:
        return qualified in self.public_tables


def keys_from_table(ref: str) -> str:
    """The qualified table of a ``keys_from`` reference (``[schema.]table.column``).

    >>> keys_from_table("regions.code"), keys_from_table("public.regions.code")
    ('public.regions', 'public.regions')
    """
    return qualify_name(ref.rsplit(".", 1)[0])


def qualify_name(name: str) -> str:
    """`people` -> `public.people`; names are lower-cased as PostgreSQL folds unquoted names."""
    parts = name.strip().lower().split(".")
    if len(parts) == 1:
        return f"public.{parts[0]}"
    if len(parts) == 2:
        return ".".join(parts)
    raise ValueError(f"table name {name!r} must be table or schema.table")
