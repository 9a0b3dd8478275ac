"""Where the wire session parses a statement: small ones in the query threads, large ones in a
bounded pool of their own, after which the process gives the memory back.

Parsing is CPU work under the GIL. A few large statements parsed at once in the 32 query threads
would take most of the interpreter from the event loop and every other session; in a pool of
:data:`PARSE_THREADS` threads at most that many large parses compete with the rest, however many
sessions send them. The statement limits (:mod:`dpsql.sql.prescan`) bound each parse to well
under a second; this bounds how many run at once.

A large parse leaves freed memory scattered over the allocator's arenas; :func:`release_memory`
collects cycles and asks the C library to return free pages to the system (``malloc_trim``), so
the resident size comes back down after a large statement instead of staying at its peak.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

LARGE_STATEMENT = 16 * 1024  # characters: parsed in the parse pool, memory released after
PARSE_THREADS = 2


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        fn = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


_TRIM = _malloc_trim()


def release_memory() -> None:
    """Collect garbage cycles and return the allocator's free pages to the system."""
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)


class ParsePool:
    """The threads large statements are parsed in (see the module docstring).

    Args:
        threads: how many large statements may be parsed at once in this process.
    """

    def __init__(self, threads: int = PARSE_THREADS) -> None:
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="dpsql-parse")

    @staticmethod
    def is_large(text: str) -> bool:
        return len(text) > LARGE_STATEMENT

    async def run(
        self, small: Executor | None, fn: Callable[..., T], text: str, *args: object
    ) -> T:
        """``fn(text, *args)``: in ``small`` (the query threads) for a small ``text``, else here."""
        executor = self._executor if self.is_large(text) else small
        call = functools.partial(fn, text, *args)
        return await asyncio.get_running_loop().run_in_executor(executor, call)

    async def release_memory(self) -> None:
        """:func:`release_memory` in one of the pool's threads (it can take milliseconds)."""
        await asyncio.get_running_loop().run_in_executor(self._executor, release_memory)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


_POOL: ParsePool | None = None


def parse_pool() -> ParsePool:
    """This process's parse pool, made at first use (after a ``--workers`` fork, never before)."""
    global _POOL
    if _POOL is None:
        _POOL = ParsePool()
    return _POOL
