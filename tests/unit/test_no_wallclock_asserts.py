"""No test asserts how fast something ran: time belongs in bench/ (the brief; issue #14).

A speed check in a test fails on a loaded machine (``test_statement_complexity`` failed with
1.83 s > 1.5 s at load 6-8) and passes on a quiet one whatever the code does. This module walks
every test file's syntax tree and refuses an ``assert`` that bounds a measured duration from
above: ``assert time.monotonic() - t0 < 5``, ``assert elapsed <= 2`` where ``elapsed`` was
assigned from a clock difference, or an equality with one. Allowed: a deadline in a wait loop
(``assert time.monotonic() < deadline``: a clock *reading* against a precomputed end), and lower
bounds on a duration (``elapsed >= quantum``: what the timing-padding tests check, which load
cannot break). Count work instead (nodes, passes, rows, calls), or use a generous deadline.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
CLOCKS = {"time", "monotonic", "perf_counter", "monotonic_ns", "perf_counter_ns", "time_ns",
          "process_time", "process_time_ns"}  # fmt: skip


def _is_clock_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name in CLOCKS


def _is_difference(node: ast.AST) -> bool:
    """A clock difference somewhere in ``node``: ``time.monotonic() - t0`` and the like."""
    return any(
        isinstance(n, ast.BinOp)
        and isinstance(n.op, ast.Sub)
        and any(_is_clock_call(x) for x in ast.walk(n))
        for n in ast.walk(node)
    )


def _durations(scope: ast.AST) -> set[str]:
    """Names assigned from a clock difference in this function (or module)."""
    names: set[str] = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and _is_difference(node.value):
            for target in node.targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _measures(node: ast.AST, durations: set[str]) -> bool:
    return _is_difference(node) or any(
        isinstance(n, ast.Name) and n.id in durations for n in ast.walk(node)
    )


def speed_assertions(source: str) -> list[int]:
    """Line numbers of asserts bounding a measured duration from above (or pinning it)."""
    tree = ast.parse(source)
    found: list[int] = []
    scopes = [
        tree,
        *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)),
    ]
    for scope in scopes:
        durations = _durations(scope)
        for node in ast.walk(scope):
            if not isinstance(node, ast.Assert):
                continue
            for cmp in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                sides = [cmp.left, *cmp.comparators]
                for op, left, right in zip(cmp.ops, sides, sides[1:], strict=False):
                    upper = (isinstance(op, ast.Lt | ast.LtE) and _measures(left, durations)) or (
                        isinstance(op, ast.Gt | ast.GtE) and _measures(right, durations)
                    )
                    pinned = isinstance(op, ast.Eq | ast.NotEq) and (
                        _measures(left, durations) or _measures(right, durations)
                    )
                    if upper or pinned:
                        found.append(node.lineno)
    return sorted(set(found))


@pytest.mark.parametrize(
    "source,flagged",
    [
        ("t0 = time.monotonic()\nassert time.monotonic() - t0 < 5\n", True),
        ("def f():\n    elapsed = time.perf_counter() - t\n    assert elapsed <= 1.5\n", True),
        ("assert 2 > time.time() - start\n", True),
        ("assert ok and time.monotonic() - t0 < 3\n", True),
        ("assert bucket(time.perf_counter() - t0) == 1\n", True),
        ("deadline = time.monotonic() + 5\nassert time.monotonic() < deadline\n", False),
        ("def f():\n    elapsed = time.perf_counter() - t\n    assert elapsed >= 2.9\n", False),
        ("assert bucket(time.perf_counter() - t0) >= 1\n", False),
        ("assert done.wait(60)\n", False),
    ],
)
def test_the_check_sees_speed_assertions(source: str, flagged: bool) -> None:
    assert bool(speed_assertions(source)) is flagged


def test_no_test_asserts_on_wall_clock_time() -> None:
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        for line in speed_assertions(path.read_text())
    ]
    assert offenders == [], "speed assertions in tests (move them to bench/): " + ", ".join(
        offenders
    )
