"""Column labels as PostgreSQL gives them to calls that sqlglot renders under another name.

PostgreSQL labels an unaliased call by the function's name as written (``SELECT now()`` is a
column ``now``, ``char_length('a')`` is ``char_length``); sqlglot renders some calls under
another name (``CURRENT_TIMESTAMP``, ``LENGTH``, ``POSITION``, ``CEIL`` ...), which PostgreSQL
would label so. :func:`keep_call_labels` aliases such select items with the name the user wrote
(recorded by :func:`dpsql.sql.names.spell_functions`), in every SELECT (a derived table's
columns are referenced by those labels too).

>>> from dpsql.sql.parse import parse_statement
>>> keep_call_labels(parse_statement("SELECT now(), char_length('a'), ceil(1)").tree).sql("postgres")
"SELECT CURRENT_TIMESTAMP AS now, LENGTH('a') AS char_length, CEIL(1)"
"""

from __future__ import annotations

import re

from sqlglot import exp

from dpsql.sql.names import SPELLED
from dpsql.sql.nodes import POSTGRES

_LEADING = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


def keep_call_labels(tree: exp.Expr) -> exp.Expr:
    """Alias, in place, unaliased calls whose rendering would change their label."""
    for select in tree.find_all(exp.Select):
        for item in list(select.expressions):
            spelled = item.meta.get(SPELLED) if isinstance(item, exp.Func) else None
            if not isinstance(spelled, str):
                continue
            m = _LEADING.match(item.sql(POSTGRES))
            if m is not None and m.group(0).lower() == spelled.lower():
                continue
            alias = exp.Alias(this=item.copy(), alias=exp.to_identifier(spelled.lower()))
            item.replace(alias)
    return tree
