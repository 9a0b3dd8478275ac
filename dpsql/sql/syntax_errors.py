"""PostgreSQL's words for a statement that does not parse.

sqlglot describes a parse failure in its own terms ("Required keyword: 'this' missing for
<class 'sqlglot.expressions.query.Where'>", "Expected table name but got <Token ...>"); none of
that reaches a user. :func:`syntax_error` says what PostgreSQL says (``syntax error at end of
input``, ``syntax error at or near "X"`` with the position, ``function f(...) does not exist``)
with a hint in the statement's own terms, and :func:`check_empty_clauses` refuses the clauses
sqlglot accepts empty (``GROUP BY`` or ``JOIN t ON`` with nothing after them, which it would
read as no grouping and a cross join). Calls PostgreSQL would refuse that sqlglot would run as
something else are refused by :func:`dpsql.sql.arities.check_calls`.
"""

from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokenizer_core import Token, TokenType

from dpsql.errors import DpsqlError, SqlSyntaxError, UndefinedFunction

_ARITY = re.compile(
    r"The number of provided arguments \((\d+)\) is (greater|less) than the "
    r"(?:maximum|minimum) number of supported arguments \((\d+)\)"
)
_MISSING = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>")
# What a clause or operator (by sqlglot's class name) needs after it, in the user's words.
_NEEDS = {
    "Where": "a condition after WHERE, e.g. WHERE amount > 0, or leave the WHERE out",
    "Having": "a condition after HAVING, e.g. HAVING COUNT(*) > 10, or leave the HAVING out",
    "Order": "the columns to sort by after ORDER BY, or leave the ORDER BY out",
    "Limit": "a number after LIMIT, or leave the LIMIT out",
    "Offset": "a number after OFFSET, or leave the OFFSET out",
    "Union": "a query after UNION",
    "Intersect": "a query after INTERSECT",
    "Except": "a query after EXCEPT",
    "Window": "a window definition after WINDOW: WINDOW w AS (PARTITION BY ...)",
    "Between": "both ends: x BETWEEN low AND high",
}
# Tokens that cannot start an expression: a clause keyword right after GROUP BY or ON.
_CLAUSE_TOKENS = frozenset(
    {
        TokenType.WHERE,
        TokenType.GROUP_BY,
        TokenType.HAVING,
        TokenType.ORDER_BY,
        TokenType.LIMIT,
        TokenType.OFFSET,
        TokenType.FETCH,
        TokenType.WINDOW,
        TokenType.UNION,
        TokenType.INTERSECT,
        TokenType.EXCEPT,
        TokenType.JOIN,
        TokenType.INNER,
        TokenType.LEFT,
        TokenType.RIGHT,
        TokenType.FULL,
        TokenType.CROSS,
        TokenType.R_PAREN,
        TokenType.SEMICOLON,
        TokenType.COMMA,
    }
)


def syntax_error(text: str, error: ParseError | TokenError) -> DpsqlError:
    """The 42601 (or 42883, a function with the wrong number of arguments) for ``error``."""
    if isinstance(error, TokenError):
        return SqlSyntaxError(
            "unterminated quoted string or comment",
            hint="close every quote ('...', \"...\", $$...$$) and every /* comment */",
        )
    err = error.errors[0] if error.errors else {}
    description = str(err.get("description", ""))
    highlight = str(err.get("highlight") or "")
    end = _end_offset(text, err.get("line"), err.get("col"))
    at_end = end is not None and not text[end:].strip().strip(";").strip()
    arity = _ARITY.search(description)
    missing = _MISSING.search(description)
    if arity or (missing and _is_function(missing.group(2)) and highlight == ")"):
        called = _function_called(text, end)
        if called is not None:
            return _arity_error(called, arity)
    needs = _NEEDS.get(missing.group(2)) if missing else None
    if needs is None and missing and not _is_function(missing.group(2)):
        needs = f'an operand after "{highlight}"' if highlight else None
    hint = f"write {needs}" if needs else _hint(description)
    # The highlighted token is the offender itself, not the last token before what is missing.
    offender = description.startswith("Invalid expression") or (
        " but got <Token" in description and "SENTINEL" not in description
    )
    if at_end and not offender:
        return SqlSyntaxError(
            "syntax error at end of input", position=len(text.rstrip().rstrip(";")) + 1, hint=hint
        )
    near = highlight or _token_at(text, end)
    return SqlSyntaxError(
        f'syntax error at or near "{near}"' if near else "syntax error",
        position=_start_offset(text, err.get("line"), err.get("col"), len(near)),
        hint=hint,
    )


def _hint(description: str) -> str:
    if description.startswith("Expecting )"):
        return "close the parenthesis: a ( has no matching )"
    expected = re.match(r"Expected (\w+(?: \w+)?) after (\w+)", description)
    if expected:
        what = "a type" if expected.group(1) == "TYPE" else expected.group(1)
        return f"write {what} after {expected.group(2)}"
    expected = re.match(r"Expected (\w+(?: \w+)?) but got", description)
    if expected:
        return f"a {expected.group(1)} is expected at that point"
    return "check the statement at that point"


def check_empty_clauses(tree: exp.Expr, text: str, tokens: list[Token]) -> None:
    """Refuse ``GROUP BY`` or ``JOIN ... ON`` with nothing after them (42601): sqlglot parses them
    as no grouping and a cross join."""
    empty_group = any(_empty_group(g) for g in tree.find_all(exp.Group))
    bare_join = any(
        j.args.get("on") is None and j.args.get("using") is None for j in tree.find_all(exp.Join)
    )
    if not empty_group and not bare_join:
        return
    wanted = ({TokenType.GROUP_BY} if empty_group else set()) | (
        {TokenType.ON} if bare_join else set()
    )
    for i, tok in enumerate(tokens):
        if tok.token_type not in wanted:
            continue
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        if after is not None and after.token_type not in _CLAUSE_TOKENS:
            continue
        what = "the columns to group by after GROUP BY, or leave the GROUP BY out"
        if tok.token_type == TokenType.ON:
            what = "a join condition after ON, e.g. ON p.region = r.code"
        if after is None or after.token_type == TokenType.SEMICOLON:
            raise SqlSyntaxError(
                "syntax error at end of input",
                position=len(text.rstrip().rstrip(";")) + 1,
                hint=f"write {what}",
            )
        raise SqlSyntaxError(
            f'syntax error at or near "{after.text}"',
            position=after.start + 1,
            hint=f"write {what}",
        )


def _empty_group(group: exp.Group) -> bool:
    return not any(
        group.args.get(k) for k in ("expressions", "grouping_sets", "cube", "rollup", "all")
    )


def _is_function(class_name: str) -> bool:
    cls = getattr(exp, class_name, None)
    return isinstance(cls, type) and issubclass(cls, exp.Func)


def _arity_error(called: tuple[str, list[str], int], arity: re.Match[str] | None) -> DpsqlError:
    name, args, position = called
    n = len(args)
    words = f"{n} argument" + ("" if n == 1 else "s")
    if arity is not None:
        limit = int(arity.group(3))
        takes = ("at most " if arity.group(2) == "greater" else "at least ") + f"{limit}"
        takes += " argument" + ("" if limit == 1 else "s")
        example = ", ".join(args[:limit]) if arity.group(2) == "greater" else None
    else:
        takes, example = "more arguments", None
    hint = f"{name} {'needs' if arity is None else 'takes'} {takes}"
    if example:
        hint += f": {name}({example})"
    return UndefinedFunction(
        f"function {name.lower()} with {words} does not exist", position=position, hint=hint
    )


def _function_called(text: str, end: int | None) -> tuple[str, list[str], int] | None:
    """(name as written, argument texts, 1-based position) of the call whose ``)`` ends at
    ``end``."""
    if end is None or end < 1 or text[end - 1] != ")":
        return None
    depth, i = 0, end - 1
    commas = [end - 1]
    while i >= 0:
        c = text[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                break
        elif c == "," and depth == 1:
            commas.append(i)
        i -= 1
    if i < 0:
        return None
    name = re.search(r"([A-Za-z_][\w$]*)\s*$", text[:i])
    if name is None:
        return None
    bounds = [i, *sorted(commas)]
    args = [text[a + 1 : b].strip() for a, b in zip(bounds, bounds[1:], strict=False)]
    return name.group(1), [a for a in args if a], name.start(1) + 1


def _line_start(text: str, line: object) -> int | None:
    if not isinstance(line, int):
        return None
    lines = text.split("\n")
    if line < 1 or line > len(lines):
        return None
    return sum(len(x) + 1 for x in lines[: line - 1])


def _end_offset(text: str, line: object, col: object) -> int | None:
    """0-based offset just past the highlighted token (sqlglot's col is its last column)."""
    start = _line_start(text, line)
    if start is None or not isinstance(col, int):
        return None
    return min(len(text), start + col)


def _start_offset(text: str, line: object, col: object, width: int) -> int | None:
    """1-based character position (as in ErrorResponse) of the highlighted token's start."""
    start = _line_start(text, line)
    if start is None or not isinstance(col, int):
        return None
    return start + max(1, col - width + 1)


def _token_at(text: str, end: int | None) -> str:
    if end is None:
        return ""
    word = re.search(r"(\S+)$", text[:end])
    return word.group(1)[:40] if word else ""
