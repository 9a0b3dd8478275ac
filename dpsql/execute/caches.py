"""The engine's memos: the boundary between :class:`dpsql.engine.Engine` and ``dpsql/execute/``.

The engine owns one :class:`EngineCaches` and hands it (or one of its memos) to the execute
modules, which read and fill it only through :meth:`Memo.get` and :meth:`Memo.remember`; none of
them touches the engine's own attributes. Every memo holds values derived from the policy, the
statement text and public catalog data (SQL texts, key types, public key values), never a value
read from a private row.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from dpsql.sql.prescan import kept_text


class Memo:
    """A bounded, thread-safe memo: past ``limit`` entries the oldest is dropped first.

    >>> m = Memo(2)
    >>> m.remember("a", 1); m.remember("b", 2); m.remember("c", 3)
    >>> m.get("a") is None, m.get("c")
    (True, 3)
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._items: dict[Hashable, Any] = {}
        self._lock = threading.Lock()
        # The value remembered for a key, or None: the dictionary's own ``get`` (read on every
        # execution of a repeated statement, several times: no Python frame of its own).
        self.get: Callable[[Hashable], Any | None] = self._items.get

    def remember(self, key: Hashable, value: Any) -> None:
        """Keep ``value`` for ``key`` (None can't be told from a miss: remember False instead),
        unless the key holds a text over :data:`~dpsql.sql.prescan.MEMO_TEXT_MAX` (a statement's
        text: worked out again each time)."""
        parts = key if isinstance(key, tuple) else (key,)
        if not all(kept_text(k) for k in parts if isinstance(k, str)):
            return
        with self._lock:
            self._items[key] = value
            if len(self._items) > self._limit:
                self._items.pop(next(iter(self._items)))

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True)
class EngineCaches:
    """The memos an engine shares with its execute modules.

    Attributes:
        sql: SQL texts per statement (public/catalog runnable SQL, a public statement's
            :class:`~dpsql.sql.bind.Template` and ``$n`` text, private and post-processing SQL).
        key_types: a private statement's group keys' and quantile arguments' PostgreSQL types, per
            analyst view, statement text and catalog state of its tables.
        keys_from: a ``keys_from`` column's public values, per ``table.column``.
    """

    sql: Memo
    key_types: Memo
    keys_from: Memo

    @classmethod
    def sized(cls, size: int) -> EngineCaches:
        """Memos for an engine caching ``size`` prepared statements (SQL texts: 4 per one)."""
        return cls(Memo(4 * size), Memo(size), Memo(size))
