"""Real BI-tool query shapes (tests/fixtures/bi/*.sql) answered end to end on the demo data."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext

BI = Path(__file__).resolve().parents[2] / "fixtures" / "bi"


def statements() -> list[tuple[str, str]]:
    out = []
    for f in sorted(BI.glob("*.sql")):
        text = "\n".join(x for x in f.read_text().splitlines() if not x.startswith("--"))
        for i, s in enumerate(x.strip() for x in text.split(";\n")):
            if s:
                out.append((f"{f.stem}-{i}", s.rstrip(";")))
    return out


STATEMENTS = statements()


def test_every_tool_is_covered() -> None:
    assert {n.split("-")[0] for n, _ in STATEMENTS} == {
        "grafana",
        "metabase",
        "superset",
        "tableau",
    }


@pytest.mark.parametrize(("name", "sql"), STATEMENTS, ids=[n for n, _ in STATEMENTS])
def test_bi_query(name: str, sql: str, engine: Engine) -> None:
    prepared = engine.prepare(sql)
    assert prepared.kind == "private"
    result = engine.execute(prepared, SessionContext(analyst="analyst"))
    assert result.epsilon_spent > 0
    assert result.columns
    a = prepared.analysis
    assert a is not None
    if not a.needs_selection:
        assert result.rows  # declared keys (or no GROUP BY): always at least one row
