"""The policy: which tables are private (:mod:`dpsql.policy.tables`), the analysts and their
budgets, the defaults, and the deployment settings (:mod:`dpsql.policy.settings`).

Sensitivity is derived from these declarations only, never from the data. Models are frozen and
reject unknown fields, so a typo in the YAML is an error rather than a silently ignored setting.
"""

from __future__ import annotations

import difflib
from fnmatch import fnmatchcase
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from dpsql.policy.settings import ServerSettings, Timing
from dpsql.policy.tables import PrivateTable, StrictModel
from dpsql.policy.verifier import parse_verifier


class Budget(StrictModel):
    epsilon: Annotated[float, Field(gt=0)]
    delta: Annotated[float, Field(ge=0, lt=1)] = 0.0
    period: Literal["none", "day", "week", "month", "year"] = "none"
    renyi_order: Annotated[float, Field(gt=1)] | None = Field(
        default=None,
        description="the Renyi order of this budget's privacy filter, alone (default: a main"
        " order chosen from epsilon and delta, with more orders beside it); fixed for a period"
        " once it is used (see docs/budget.md)",
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


class Analyst(StrictModel):
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
        if v is None:
            return v
        try:
            parse_verifier(v)
        except ValueError:
            raise ValueError(
                "credential must be a SCRAM-SHA-256 verifier (SCRAM-SHA-256$<iterations>:<salt>"
                "$<StoredKey>:<ServerKey>, base64 fields, as in PostgreSQL's pg_authid); "
                "make one with `dpsql verifier NAME`"
            ) from None
        return v


class Defaults(StrictModel):
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


class Policy(StrictModel):
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
    def _keys_from_public(self) -> Policy:
        """A ``keys_from`` table is one of ``public_tables`` (docs/policy.md): its values are
        released as group keys, and analysts are granted or denied it like any public table."""
        for name, t in self.tables.items():
            for cname, c in t.columns.items():
                if not c.keys_from:
                    continue
                table = keys_from_table(c.keys_from)
                if table in self.public_tables:
                    continue
                if table in self.tables:
                    raise ValueError(
                        f"tables.{name}.columns.{cname}: keys_from {c.keys_from} reads the "
                        f"private table {table}: keys come from a public table (list it under "
                        "public_tables:) or from keys:"
                    )
                close = difflib.get_close_matches(table, self.public_tables, n=1)
                guess = f" (did you mean {close[0]}?)" if close else ""
                raise ValueError(
                    f"tables.{name}.columns.{cname}: keys_from {c.keys_from}: {table} is not "
                    f"one of public_tables{guess}: list the table of the keys under "
                    "public_tables:"
                )
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
