"""tests/unit: one module's logic in process, no PostgreSQL (tests/README.md). A unit test that
asks for the test cluster (directly or through make_db, demo_dsn, engine, ...) belongs in
tests/integration/: collection stops and says so."""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    misplaced = [
        item.nodeid
        for item in items
        if item.path.is_relative_to(UNIT) and "pg_admin_dsn" in getattr(item, "fixturenames", ())
    ]
    if misplaced:
        raise pytest.UsageError(
            "unit tests use no PostgreSQL; move these to tests/integration/ (tests/README.md): "
            + ", ".join(misplaced)
        )
