"""Functions and operators of the upstream database that would shadow the ones dpsql allows.

dpsql allows functions by *name* (``md5``, ``upper``, ``format`` ...), but PostgreSQL picks a
function by name *and argument types* among every schema of the search path: with a function
``public.md5(integer)`` in the database, ``SELECT md5(1)`` calls it, not ``pg_catalog.md5``. Such a
function runs with the upstream role's rights, so one that reads a private table would send its
rows to the analyst (the red team's ``public.md5(integer)`` returned e-mail addresses through a
public query, and ``upper(quantity)`` ran one inside a private query's WHERE).

So the names of functions and the symbols of operators defined outside the system schemas
(``pg_catalog``, ``information_schema``), other than those an extension installed (vetted code
such as citext's ``upper(citext)``), are read from the upstream (:data:`SHADOW_SQL`) and a
statement that calls one is refused (42501). An operator shadows the same way (``quantity + 'x'``
with a user-defined ``+(integer, text)``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot import exp

from dpsql.errors import PrivacyViolation

_USER_SCHEMA = (
    "n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%'"
)
_NOT_EXTENSION = (
    "NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid = {cls}::regclass "
    "AND d.objid = {oid} AND d.deptype = 'e')"
)
SHADOW_SQL = (
    "SELECT 'f', lower(p.proname) FROM pg_catalog.pg_proc p "
    "JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
    f"WHERE {_USER_SCHEMA} AND "
    + _NOT_EXTENSION.format(cls="'pg_catalog.pg_proc'", oid="p.oid")
    + " UNION SELECT 'o', o.oprname FROM pg_catalog.pg_operator o "
    "JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace "
    f"WHERE {_USER_SCHEMA} AND "
    + _NOT_EXTENSION.format(cls="'pg_catalog.pg_operator'", oid="o.oid")
)


@dataclass(frozen=True)
class Shadows:
    """User-defined function names (lower case) and operator symbols of the upstream."""

    functions: frozenset[str] = frozenset()
    operators: frozenset[str] = frozenset()

    @classmethod
    def from_rows(cls, rows: list[tuple[str, str]]) -> Shadows:
        return cls(
            frozenset(str(n) for k, n in rows if k == "f"),
            frozenset(str(n) for k, n in rows if k == "o"),
        )


_OPERATORS: dict[type[exp.Expression], str] = {
    exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%", exp.Pow: "^",
    exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=",
    exp.DPipe: "||", exp.Like: "~~", exp.ILike: "~~*", exp.RegexpLike: "~", exp.Neg: "-",
    exp.BitwiseAnd: "&", exp.BitwiseOr: "|", exp.BitwiseXor: "#", exp.BitwiseNot: "~",
    exp.BitwiseLeftShift: "<<", exp.BitwiseRightShift: ">>", exp.ArrayContainsAll: "@>",
    exp.ArrayOverlaps: "&&", exp.Between: ">=", exp.In: "=",
}  # fmt: skip
_HEAD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_$]*)\s*\(")


def _names(node: exp.Func) -> set[str]:
    """The names PostgreSQL resolves for a call: as written, and as sqlglot writes it back."""
    names = {str(node.name).lower()} if isinstance(node, exp.Anonymous) else set()
    names.add(node.sql_name().lower())
    m = _HEAD.match(node.sql("postgres"))
    if m:
        names.add(m.group(1).lower())
    return names


def check_shadowing(tree: exp.Expression, shadows: Shadows) -> None:
    """Refuse (42501) a statement that calls a function or uses an operator the upstream
    database defines outside its system schemas.

    Raises:
        PrivacyViolation: such a call or operator is in ``tree``.
    """
    if not shadows.functions and not shadows.operators:
        return
    for node in tree.walk():
        if isinstance(node, exp.Func) and shadows.functions:
            hit = _names(node) & shadows.functions
            if hit:
                name = sorted(hit)[0]
                raise PrivacyViolation(
                    f"function {name}() is not allowed through dpsql: the database defines its "
                    "own function of that name",
                    detail="PostgreSQL could call the database's function instead of the "
                    "built-in one, with the rights of dpsql's upstream role",
                    hint="ask the data owner to rename or drop that function, or to install it "
                    "as part of an extension",
                )
        symbol = _OPERATORS.get(type(node))
        if symbol is not None and symbol in shadows.operators:
            raise PrivacyViolation(
                f"operator {symbol} is not allowed through dpsql: the database defines its own "
                "operator of that name",
                hint="ask the data owner to drop that operator, or to install it as part of an "
                "extension",
            )
