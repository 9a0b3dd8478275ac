"""The running statement's cancellation, for one session (:mod:`dpsql.wire.session`).

What may cancel it: a CancelRequest (the server finds the session by its key), the client going
away mid-statement, the client's ``statement_timeout``, shutdown. It holds the running
statement's token (a worker-thread statement's :class:`~dpsql.execute.backend.CancelToken`, or
the fast path's :class:`~dpsql.wire.upstream.AsyncCancel`), repeats a worker-thread statement's
cancel until it has ended (PostgreSQL drops one that arrives before the query), and, with timing
padding, defers a client's cancel of a private statement to its delivery moment.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from typing import TYPE_CHECKING

from dpsql.execute.backend import CancelToken
from dpsql.execute.timing import remaining_s
from dpsql.wire.upstream import AsyncCancel

if TYPE_CHECKING:
    from dpsql.policy.settings import Timing


class Cancelling:
    """The cancel state of one session's running statement (none between statements)."""

    def __init__(self, executor: concurrent.futures.Executor) -> None:
        self.executor = executor
        self.token: AsyncCancel | CancelToken | None = None  # the running statement's
        self._retry: asyncio.Task[None] | None = None
        self.by_client = False  # the client asked to cancel the running statement
        # a padded private statement in flight: its timing and arrival (monotonic_ns), so that
        # the client's cancel takes effect at its delivery moment (:meth:`cancel`)
        self.padding: tuple[Timing, int] | None = None

    def call_ended(
        self, loop: asyncio.AbstractEventLoop, token: CancelToken | None, _: object
    ) -> None:
        """An engine call that outlived its task has ended (in its thread): forget its token."""

        def forget() -> None:
            if self.token is token:
                self.token = None

        with contextlib.suppress(RuntimeError):  # the loop is closed: the server has stopped
            loop.call_soon_threadsafe(forget)

    def cancel(self, by_client: bool, busy: bool) -> None:
        """Cancel the running upstream query (from a CancelRequest or a client gone,
        ``by_client``, or shutdown; ``busy``: a statement runs or waits for its delivery moment).

        A client's request while a statement runs or waits for its delivery moment makes its
        57014 say "canceling statement due to user request" whatever ended the query: whether
        the policy's timeout fired first depends on how long the query ran (private rows), the
        client's request does not.

        With timing padding, a client's cancel of a private statement takes effect at the
        statement's next delivery moment (the one its answer would have waited for), not when
        it arrives: a cancel at a moment T the analyst picks cut the query short only if it
        still ran at T, so 57014 or the answer (and the history's outcome, and whether a free
        repeat is stored) told whether the run time exceeded T, which the padding hides
        (review22, tests/redteam/test_cancel_timing.py). At a delivery moment that is what the
        delivery already shows; with ``min_ms`` above the statement timeout, nothing."""
        if by_client and busy:
            self.by_client = True
        token = self.token
        if token is None:
            return
        padding = self.padding
        if by_client and padding is not None:
            delay = remaining_s(*padding)
            if delay > 0:
                asyncio.get_running_loop().call_later(delay, self._cancel_now, token)
                return
        self._cancel_now(token)

    def _cancel_now(self, token: AsyncCancel | CancelToken) -> None:
        """Cancel ``token``'s statement, if it still runs (repeated until it has ended)."""
        if self.token is not token:
            return  # ended since (a deferred cancel: its answer was ready in time)
        token.cancel()
        if not isinstance(token, AsyncCancel) and self._retry is None:
            self._retry = asyncio.ensure_future(self._cancel_again(token))

    @property
    def retry_task(self) -> asyncio.Task[None] | None:
        """The task repeating a worker-thread statement's cancel, while one runs."""
        return self._retry

    async def _cancel_again(self, token: AsyncCancel | CancelToken) -> None:
        """Repeat a worker-thread statement's cancel every ``AsyncCancel.RETRY_S`` until it has
        ended: PostgreSQL drops a cancel that arrives before the query (or between protocol
        messages), e.g. one requested while the engine was still planning."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                await asyncio.sleep(AsyncCancel.RETRY_S)
                if self.token is not token:
                    return
                await loop.run_in_executor(self.executor, token.cancel)
        except RuntimeError:  # the executor is shut down: the server is stopping
            pass
        finally:
            self._retry = None
