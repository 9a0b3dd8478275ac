"""The client's ``statement_timeout``: applied where it reveals nothing, said where it is not.

BI tools send ``SET statement_timeout = '5s'``. On a public or catalog statement dpsql applies
the shorter of it and the policy's timeout (``statement_timeout_ms``, the data owner's): when
the client's runs out first the statement is cancelled, 57014 "canceling statement due to
statement timeout", as PostgreSQL says.

A private query keeps the policy's timeout, whatever the client set. A timeout the analyst
chooses would be a timing oracle: whether the query is cancelled at T tells whether it ran
longer than T, a fact about the private rows outside the noisy answer, and the analyst could
move T to search for it (dpsql pads a private answer's delivery so that its moment does not tell
how long the query ran: docs/timing.md; a cancel at the analyst's own T would undo that). The
policy's timeout is the data owner's choice, the same for every run of the statement, and a
query it cancels stays charged (docs/budget.md). So the session says it once per value, in a
NOTICE with the first private query that runs while the client's timeout is the shorter; SHOW
statement_timeout shows what the client set, as PostgreSQL does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from dpsql.errors import DpsqlError, QueryCanceled
from dpsql.wire.engine_api import EngineAPI, UpstreamEngine
from dpsql.wire.setting_values import timeout_ms

T = TypeVar("T")


def client_timeout_ms(settings: dict[str, str], policy_ms: int | None) -> int:
    """The client's statement_timeout (the session's ``settings``) when it is shorter than the
    policy's (``policy_ms``), else 0."""
    shown = settings.get("statement_timeout", "0")
    if shown == "0":
        return 0
    ms = timeout_ms(settings)
    return ms if policy_ms is None or ms < policy_ms else 0


def policy_timeout_ms(engine: EngineAPI) -> int | None:
    """The policy's statement timeout (the engine's backend's), if the engine has one."""
    if isinstance(engine, UpstreamEngine):
        return engine.backend.timeout_ms
    return None


def private_notice(shown: str, policy_ms: int) -> str:
    """The NOTICE of a private query run under the policy's timeout, not the client's."""
    return (
        f"statement_timeout = {shown} is not applied to private queries: they run under the "
        f"data owner's statement timeout ({_seconds(policy_ms)}); a cancel at a time you choose "
        "would tell whether the query ran longer, a fact about the private rows outside its "
        "noisy answer"
    )


def _seconds(ms: int) -> str:
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


async def within(run: Awaitable[T], ms: int, cancel: Callable[[], None]) -> T:
    """``run`` cancelled (``cancel()``) if it has not ended within ``ms`` milliseconds; its
    cancel is then PostgreSQL's statement timeout error."""
    fired = False

    def fire() -> None:
        nonlocal fired
        fired = True
        cancel()

    timer = asyncio.get_running_loop().call_later(ms / 1000, fire)
    try:
        return await run
    except DpsqlError as e:
        if fired and e.sqlstate == QueryCanceled.sqlstate:
            raise QueryCanceled("canceling statement due to statement timeout") from None
        raise
    finally:
        timer.cancel()
