"""What a release covers: the private table and, per chosen column, its public bins (an ``Axis``).

Every axis is public knowledge (declared keys, or bins built from declared bounds), never read from
the private data, so the set of cells (including empty ones) reveals nothing. A categorical axis
takes the column's ``keys`` (or the values of its ``keys_from`` public table; booleans have the
implicit keys false/true); rows whose value is not a key, or NULL, fall in no cell. A numeric axis
cuts the declared bounds [lo, hi] into bins of a given width (default: 10 bins) or at given edges;
values are clamped into the outer bins, NULLs fall in no cell.

>>> a = Axis("age", "integer", edges=(0.0, 50.0, 101.0))
>>> a.size, a.labels
(2, ('[0, 50)', '[50, 101)'))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from psycopg import sql as pgsql

from dpsql.errors import (
    InvalidParameter,
    PrivacyViolation,
    UndefinedColumn,
    UndefinedTable,
    UnsupportedSql,
)
from dpsql.policy.model import Policy, qualify_name
from dpsql.policy.tables import Column, PrivateTable

MAX_BINS = 10_000
DEFAULT_BINS = 10
_BOOL_KEYS = ("false", "true")


@dataclass(frozen=True)
class Axis:
    """One released column: its name, type family, and either text ``keys`` or numeric ``edges``."""

    name: str
    family: str
    keys: tuple[str, ...] | None = None
    edges: tuple[float, ...] | None = None

    @property
    def size(self) -> int:
        return len(self.keys) if self.keys is not None else len(self.edges or ()) - 1

    @property
    def labels(self) -> tuple[str, ...]:
        if self.keys is not None:
            return self.keys
        e = self.edges or ()
        return tuple(f"[{_num(e[i])}, {_num(e[i + 1])})" for i in range(len(e) - 1))

    def index_sql(self) -> pgsql.Composable:
        """The 0-based bin index of the column in SQL (NULL when the row falls in no bin)."""
        col = pgsql.Identifier(self.name)
        if self.keys is not None:
            return pgsql.SQL("(array_position({}::text[], {}::text) - 1)").format(
                pgsql.Literal(list(self.keys)), col
            )
        return pgsql.SQL("(LEAST(GREATEST(width_bucket({}::float8, {}), 1), {}) - 1)").format(
            col, pgsql.Literal([float(x) for x in self.edges or ()]), pgsql.Literal(self.size)
        )

    def values(self) -> list[object]:
        """A representative value per bin for synthetic rows: the key, or the bin's middle."""
        if self.keys is not None:
            if self.family == "boolean":
                return [k == "true" for k in self.keys]
            if self.family == "integer":
                return [int(k) for k in self.keys]
            if self.family == "numeric":
                return [float(k) for k in self.keys]
            return list(self.keys)
        e = self.edges or ()
        if self.family == "integer":  # bins [a, b) of integers: the middle integer
            return [
                int(math.floor(e[i])) + (math.ceil(e[i + 1]) - math.floor(e[i]) - 1) // 2
                for i in range(len(e) - 1)
            ]
        return [(e[i] + e[i + 1]) / 2 for i in range(len(e) - 1)]

    def describe(self) -> dict[str, object]:
        if self.keys is not None:
            return {"column": self.name, "type": self.family, "keys": list(self.keys)}
        return {"column": self.name, "type": self.family, "edges": list(self.edges or ())}


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True)
class Source:
    """The private table a release reads and its chosen axes."""

    table: str
    private: PrivateTable
    axes: tuple[Axis, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.size for a in self.axes)

    @property
    def cells(self) -> int:
        return math.prod(self.shape)


def check_epsilon(epsilon: float, delta: float | None = None) -> tuple[Fraction, Fraction]:
    """Epsilon and delta as exact fractions, refusing epsilon <= 0 and delta outside [0, 1)."""
    if not (epsilon == epsilon and 0 < epsilon < math.inf):
        raise InvalidParameter(
            f"epsilon must be a positive number, got {epsilon}",
            hint="pass --epsilon with a value such as 1.0 (smaller is more private)",
        )
    d = 0.0 if delta is None else delta
    if not (d == d and 0 <= d < 1):
        raise InvalidParameter(
            f"delta must be in [0, 1), got {d}", hint="use a small delta such as 1e-6, or 0"
        )
    return Fraction(repr(float(epsilon))), Fraction(repr(float(d)))


def parse_bins(specs: Sequence[str]) -> dict[str, tuple[float, ...] | float]:
    """``["age=10", "income=0,1000,5000"]`` -> {"age": 10.0, "income": (0.0, 1000.0, 5000.0)}.

    >>> parse_bins(["age=5", "x=0,1,3"])
    {'age': 5.0, 'x': (0.0, 1.0, 3.0)}
    """
    out: dict[str, tuple[float, ...] | float] = {}
    for s in specs:
        name, eq, value = s.partition("=")
        hint = "write --bins COLUMN=WIDTH or --bins COLUMN=E0,E1,...,EN (increasing edges)"
        if not eq or not name.strip() or not value.strip():
            raise InvalidParameter(f"bad --bins {s!r}", hint=hint)
        try:
            nums = tuple(float(v) for v in value.split(","))
        except ValueError:
            raise InvalidParameter(f"bad --bins {s!r}: not numbers", hint=hint) from None
        if not all(math.isfinite(v) for v in nums):
            raise InvalidParameter(f"bad --bins {s!r}: not finite", hint=hint)
        if len(nums) == 1:
            if nums[0] <= 0:
                raise InvalidParameter(f"bin width must be > 0 in {s!r}", hint=hint)
            out[name.strip().lower()] = nums[0]
        else:
            if any(b <= a for a, b in zip(nums, nums[1:], strict=False)):
                raise InvalidParameter(f"bin edges must increase in {s!r}", hint=hint)
            out[name.strip().lower()] = nums
    return out


def resolve_source(
    policy: Policy,
    table: str,
    columns: Sequence[str],
    bins: dict[str, tuple[float, ...] | float] | None = None,
    keys_from: Callable[[str], tuple[str, ...]] | None = None,
) -> Source:
    """Check the table and columns against the policy and build each column's public axis.

    Raises:
        UndefinedTable: the table is not a private table of the policy.
        UndefinedColumn: a column is not declared for the table.
        PrivacyViolation: an identifier column, or a column with neither keys nor bounds.
        InvalidParameter: no columns, duplicates, bins for a non-numeric column, too many bins.
    """
    try:
        name = qualify_name(table)
    except ValueError as e:
        raise InvalidParameter(str(e), hint="name the table as schema.table") from None
    private = policy.private_table(name)
    if private is None:
        raise UndefinedTable(
            f"table {name} is not a private table of the policy",
            hint="release one of: " + (", ".join(sorted(policy.tables)) or "(none declared)"),
        )
    cols = [c.strip().lower() for c in columns if c.strip()]
    if not cols:
        raise InvalidParameter("no columns given", hint="pass --columns a,b")
    if len(set(cols)) != len(cols):
        raise InvalidParameter(f"duplicate columns in {', '.join(cols)}", hint="name each once")
    bins = dict(bins or {})
    unused = set(bins) - set(cols)
    if unused:
        raise InvalidParameter(
            f"--bins names columns that are not released: {', '.join(sorted(unused))}",
            hint="list them in --columns too, or drop their --bins",
        )
    axes = tuple(_axis(name, c, private, bins.get(c), keys_from or _no_keys_from) for c in cols)
    return Source(name, private, axes)


def _no_keys_from(ref: str) -> tuple[str, ...]:
    raise InvalidParameter(f"keys_from {ref} needs a database connection")


def _axis(
    table: str,
    name: str,
    private: PrivateTable,
    bins: tuple[float, ...] | float | None,
    keys_from: Callable[[str], tuple[str, ...]],
) -> Axis:
    col = private.column(name)
    if col is None:
        raise UndefinedColumn(
            f"column {table}.{name} is not declared in the policy",
            hint="choose among: "
            + ", ".join(c for c, v in private.columns.items() if not v.identifier),
        )
    if col.identifier or name == private.privacy_unit:
        raise PrivacyViolation(
            f"column {table}.{name} is an identifier and can't be released",
            hint="release a column with declared keys or bounds instead",
        )
    if bins is not None and col.family not in ("integer", "numeric"):
        raise InvalidParameter(
            f"--bins applies to numeric columns; {table}.{name} is {col.type}",
            hint="drop --bins for it; its declared keys are used",
        )
    if bins is None:
        keys = _keys(col, keys_from)
        if keys is not None:
            return Axis(name, col.family, keys=keys)
    if col.bounds is None:
        raise PrivacyViolation(
            f"column {table}.{name} has no declared keys or bounds, so its values can't be "
            "binned without looking at the data",
            hint="declare keys (or keys_from) for it in the policy, or, for a numeric column, "
            "bounds (lo and hi)",
        )
    return Axis(name, col.family, edges=_edges(table, name, col, bins))


def _keys(col: Column, keys_from: Callable[[str], tuple[str, ...]]) -> tuple[str, ...] | None:
    if col.keys is not None:
        return col.key_texts
    if col.keys_from is not None:
        return keys_from(col.keys_from)
    if col.family == "boolean":
        return _BOOL_KEYS
    return None


def _edges(
    table: str, name: str, col: Column, bins: tuple[float, ...] | float | None
) -> tuple[float, ...]:
    b = col.bounds
    if b is None or not isinstance(b[0], (int, float)) or not isinstance(b[1], (int, float)):
        raise UnsupportedSql(
            f"column {table}.{name} has date or time bounds: only numeric bounds can be binned",
            hint="declare keys (or keys_from) for it in the policy",
        )
    lo, hi = float(b[0]), float(b[1])
    integer = col.family == "integer"
    if isinstance(bins, tuple):
        edges = bins
    else:
        top = hi + 1 if integer else hi
        span = top - lo
        width = bins if bins is not None else span / DEFAULT_BINS
        if integer:
            width = max(1.0, math.ceil(width)) if bins is None else width
        if span <= 0:
            return (lo, lo + 1.0)
        n = math.ceil(span / width - 1e-9)
        if n > MAX_BINS:
            raise InvalidParameter(
                f"{n} bins for {table}.{name} is too many (at most {MAX_BINS})",
                hint="use a wider --bins width",
            )
        edges = tuple(min(lo + i * width, top) for i in range(n)) + (top,)
    if len(edges) - 1 > MAX_BINS:
        raise InvalidParameter(f"too many bins for {table}.{name}", hint="use fewer edges")
    return edges
