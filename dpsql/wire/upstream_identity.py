"""What the upstream says about itself, read once when the server starts: its database name and
version. dpsql reports the version as the upstream's (``SHOW server_version``, the startup
ParameterStatus and ``version()`` agree byte for byte) and serves one database under its name.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpsql.errors import InvalidCatalogName
from dpsql.wire.engine_api import EngineAPI, UpstreamEngine

FALLBACK_VERSION = ("16.0", "160000")  # an engine without an upstream (unit tests' fakes)

_QUERY = (
    "SELECT current_database()::text, current_setting('server_version'), "
    "current_setting('server_version_num')"
)


@dataclass(frozen=True)
class UpstreamIdentity:
    database: str | None  # None: unknown (no upstream)
    server_version: str
    server_version_num: str


def read_identity(engine: EngineAPI) -> UpstreamIdentity:
    """The upstream's identity through the engine's backend (blocking: call it off the loop);
    the fallback for an engine that has none."""
    if not isinstance(engine, UpstreamEngine):
        return UpstreamIdentity(None, *FALLBACK_VERSION)
    row = engine.backend.run_own(_QUERY).rows[0]
    return UpstreamIdentity(str(row[0]), str(row[1]), str(row[2]))


def check_database(name: str, served: str | None) -> None:
    """Refuse (3D000, as PostgreSQL after authentication) a database other than the served one;
    ``served`` None accepts any name (an in-process server of tests and embedders)."""
    if served is not None and name != served:
        raise InvalidCatalogName(
            f'database "{name}" does not exist',
            hint=f'dpsql serves one database: connect to "{served}"',
        )
