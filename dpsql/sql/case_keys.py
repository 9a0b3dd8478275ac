"""Which results of a CASE key a WHERE clause leaves possible.

``WHERE amount < 100 GROUP BY CASE WHEN amount < 100 THEN 'small' ELSE 'large' END``: a row
reaching 'large' has ``amount < 100`` not true, and a row passing the WHERE clause has it true,
so no row is in group 'large': releasing it would show a noisy phantom (PostgreSQL returns
'small' only). Each condition (a comparison, ``IN``, ``LIKE``, ...) is a variable taking true,
false or NULL; the same condition text on the same row has the same value (functions over
private rows are deterministic: volatile ones are refused), and comparisons of the same operands
are one variable (``amount >= 100`` is NOT ``amount < 100``: :func:`condition_key`). A result is kept when some
assignment of the conditions the CASE and the WHERE share makes the WHERE clause true and the
CASE reach that result; conditions not shared may take any value. Treating conditions as
independent only adds possibilities, so a result that could occur is never dropped (sound, as
:mod:`dpsql.sql.key_domain` requires); the domain still comes from the statement's text alone.
"""

from __future__ import annotations

import itertools

from sqlglot import exp

from dpsql.sql.key_literals import literal_text
from dpsql.sql.key_truth import Hypothesis, condition_key, truth

MAX_SHARED = 7  # 3^7 = 2187 assignments at most; more shared conditions: keep every result


def _leaves(node: exp.Expr) -> set[str]:
    """The SQL of the conditions ``node`` combines with AND/OR/NOT (negations unwrapped)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, (exp.And, exp.Or)):
        return _leaves(node.this) | _leaves(node.expression)
    if isinstance(node, exp.Not):
        return _leaves(node.this)
    if isinstance(node, exp.Boolean):
        return set()
    return {condition_key(node)[0]}


def _reaches(case: exp.Case, text: str | None, h: Hypothesis, fixed: dict[str, str]) -> bool:
    """Can ``case`` yield ``text`` (None: NULL) under ``fixed``? (branches taken in order)"""
    reach = True  # some row may get this far (every earlier condition not true)
    for branch in case.args.get("ifs") or []:
        t = truth(branch.this, h, fixed)
        got = literal_text(branch.args.get("true"))
        if got is None:
            return True
        if "t" in t and got[1] == text:
            return True
        reach = bool(t - {"t"})
        if not reach:
            return False
    got = literal_text(case.args.get("default"))
    return got is None or got[1] == text


def case_admits(key: exp.Expr, text: str | None, where: exp.Expr, h: Hypothesis) -> bool:
    """False only when no row passing ``where`` makes the CASE ``key`` print ``text``."""
    while isinstance(key, exp.Paren):
        key = key.this
    if not isinstance(key, exp.Case) or key.this is not None:  # searched CASE only
        return True
    conditions: set[str] = set()
    for branch in key.args.get("ifs") or []:
        conditions |= _leaves(branch.this)
    shared = sorted(conditions & _leaves(where))
    if not shared or len(shared) > MAX_SHARED:
        return True
    for values in itertools.product("tfn", repeat=len(shared)):
        fixed = dict(zip(shared, values, strict=True))
        if "t" in truth(where, h, fixed) and _reaches(key, text, h, fixed):
            return True
    return False
