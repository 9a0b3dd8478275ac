"""Untyped string literals next to object ids: refused in catalog queries.

PostgreSQL types an untyped literal from what it meets: in ``to_regclass('a') = 'salaries'``,
``COALESCE(to_regclass('x'), 'salaries')``, ``array_position(ARRAY['a'::regclass], 'salaries')``
or ``typinput = 'hr.f'`` the literal becomes a ``regclass``/``regproc`` and is read by its input
function, which raises "does not exist" for a missing name but not for a hidden one: an existence
oracle, and a way to print a hidden object's name. The guards can't see such implicit casts, so a
bare string literal whose peer (the other operand, argument, branch, list or set-operation
column) is an object id is refused; an explicit ``'name'::regclass`` is looked up safely.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.catalog.build import LOOKUP, cast_target
from dpsql.catalog.function_rules import REG_COLUMNS
from dpsql.errors import PrivacyViolation

_TO_REG = frozenset(LOOKUP.values()) | {
    "to_regrole", "to_regoper", "to_regoperator", "to_regcollation",
}  # fmt: skip
# Constructs that give all their arguments one common type (polymorphic functions too).
_COMBINING = (
    exp.Coalesce, exp.Greatest, exp.Least, exp.Nullif, exp.Array, exp.ArrayAppend,
    exp.ArrayPrepend, exp.ArrayRemove, exp.ArrayPosition, exp.ArrayConcat,
)  # fmt: skip
_POLYMORPHIC = frozenset({"array_positions", "array_replace", "array_fill", "width_bucket"})


def check_untyped_literals(query: exp.Expr) -> None:
    """Refuse a bare string literal that PostgreSQL would cast to an object-id type."""
    aliases: set[str] = set()
    for _ in range(2):  # a reg-typed column of a derived table, then one used in another
        aliases |= {
            a.alias.lower()
            for a in query.find_all(exp.Alias)
            if a.alias and _reg_typed(a.this, aliases)
        }
    for lit in query.find_all(exp.Literal):
        if lit.is_string and any(_reg_typed(p, aliases) for p in _peers(lit)):
            _refuse(lit)
    for setop in query.find_all(exp.SetOperation):
        _check_columns([_projections(setop.left), _projections(setop.right)], aliases)
    for values in query.find_all(exp.Values):
        _check_columns([list(t.expressions) for t in values.expressions], aliases)


def _refuse(lit: exp.Expr) -> None:
    raise PrivacyViolation(
        f"the string {lit.sql('postgres')} would be read as an object name here",
        hint="cast it explicitly ('name'::regclass, 'name'::regproc, to_regclass('name')): "
        "dpsql looks such names up without revealing hidden objects",
    )


def _bare(node: exp.Expr) -> bool:
    return isinstance(node, exp.Literal) and node.is_string


def _check_columns(rows: list[list[exp.Expr]], aliases: set[str]) -> None:
    for column in zip(*rows, strict=False):
        if any(_reg_typed(c, aliases) for c in column):
            for c in column:
                if _bare(c):
                    _refuse(c)


def _projections(node: exp.Expr) -> list[exp.Expr]:
    while isinstance(node, exp.Subquery):
        node = node.this
    return list(node.expressions) if isinstance(node, exp.Select) else []


def _peers(lit: exp.Expr) -> list[exp.Expr]:
    """The expressions whose type PostgreSQL would give the literal."""
    node = lit
    while isinstance(node.parent, exp.Paren):
        node = node.parent
    parent = node.parent
    if parent is None or isinstance(parent, exp.Cast):
        return []
    if isinstance(parent, exp.In):
        return [parent.this] if node is not parent.this else list(parent.expressions)
    if isinstance(parent, exp.If):
        case = parent.parent
        if node is not parent.args.get("true") or not isinstance(case, exp.Case):
            return []
        return _case_results(case)
    if isinstance(parent, exp.Case):
        return _case_results(parent) if node is parent.args.get("default") else [parent.this]
    polymorphic = isinstance(parent, exp.Anonymous) and parent.name.lower() in _POLYMORPHIC
    if isinstance(parent, (exp.Binary, *_COMBINING)) or polymorphic:
        return [c for c in parent.iter_expressions() if c is not node]
    return []


def _case_results(case: exp.Case) -> list[exp.Expr]:
    out = [i.args["true"] for i in case.args.get("ifs") or [] if i.args.get("true") is not None]
    default = case.args.get("default")
    return [*out, default] if default is not None else out


def _reg_typed(node: exp.Expr | None, aliases: set[str]) -> bool:
    """True when ``node`` is (or may be) of an object-identifier type."""
    if node is None:
        return False
    if isinstance(node, (exp.Paren, exp.Any, exp.All, exp.Alias)):
        return _reg_typed(node.this, aliases)
    if isinstance(node, exp.Cast):
        target = cast_target(node).lstrip("_")
        return target.startswith("reg")
    if isinstance(node, exp.Anonymous):
        return node.name.lower() in _TO_REG
    if isinstance(node, exp.Column):
        return node.name.lower() in REG_COLUMNS or node.name.lower() in aliases
    if isinstance(node, exp.Subquery):
        return any(_reg_typed(p, aliases) for p in _projections(node))
    if isinstance(node, exp.Case):
        return any(_reg_typed(r, aliases) for r in _case_results(node))
    if isinstance(node, _COMBINING):
        return any(_reg_typed(c, aliases) for c in node.iter_expressions())
    return False
