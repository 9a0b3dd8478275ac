"""Re-run the collection of real client catalog queries and check that the committed fixtures
still cover every query the installed clients send (a new client version may send new ones)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.catalog.fixtures import HERE, read_fixture, shape


@pytest.mark.slow
def test_committed_fixtures_cover_the_clients(tmp_path: Path) -> None:
    from tests.compat.conftest import require

    for tool in ("psql", "java", "node", "py:asyncpg", "py:pg8000", "py:sqlalchemy", "py:pandas"):
        require(tool)
    from tests.fixtures.catalog.collect import collect

    counts = collect(tmp_path)
    assert {"psql", "psycopg", "asyncpg", "sqlalchemy", "pandas", "jdbc", "node-pg"} <= set(counts)
    missing = []
    for fresh in sorted(tmp_path.glob("*.sql")):
        if fresh.name.endswith(".session.sql"):
            continue
        committed = {shape(q.text) for q in read_fixture(HERE / fresh.name)}
        missing += [
            f"{fresh.stem}: {q.text[:80]}"
            for q in read_fixture(fresh)
            if shape(q.text) not in committed
        ]
    assert not missing, "new client queries; run tests/fixtures/catalog/collect.py:\n" + "\n".join(
        missing
    )
