"""The upstream's shadowing functions and operators (:mod:`dpsql.sql.shadowing`), read at most
every ``REFRESH_S`` seconds per engine, and the statements checked against them.

:func:`check` reads the upstream when its copy is missing or older than ``REFRESH_S`` (call it
from a worker thread); :func:`checked` never does (the wire's event loop asks it and falls back to
the worker path when it says no).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.sql.shadowing import SHADOW_SQL, Shadows, check_shadowing

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext

REFRESH_S = 60.0
_KEY = ("shadows",)


def _current(engine: EngineContext) -> tuple[float, Shadows] | None:
    hit = engine.caches.sql.get(_KEY)
    if hit is None or time.monotonic() - hit[0] > REFRESH_S:
        return None
    return hit  # type: ignore[no-any-return]


def load(engine: EngineContext) -> tuple[float, Shadows]:
    """The upstream's shadows (read now if the copy is missing or stale)."""
    hit = _current(engine)
    if hit is None:
        public = list(engine.policy.public_tables)
        rows = engine.backend.run(SHADOW_SQL, (public,), private=False).rows
        got = [(str(k), str(n), None if d is None else str(d)) for k, n, d in rows]
        hit = (time.monotonic(), Shadows.from_rows(got, set(public)))
        engine.caches.sql.remember(_KEY, hit)
    return hit


def check(
    engine: EngineContext,
    text: str,
    tree: exp.Expr | None,
    also_reads: tuple[str, ...] = (),
    scope: str = "",
    private: bool = False,
) -> None:
    """Refuse ``tree`` (statement ``text``) if it calls a shadowed function or operator or reads
    a public view of protected data (``also_reads``: tables read through the policy, such as a
    ``keys_from`` table), or, ``private``, a public table whose reading can fail on its own rows
    (:mod:`dpsql.sql.public_views`); a statement that passes is remembered until the shadows
    are read again."""
    if tree is None:
        return
    loaded_at, shadows = load(engine)
    key = ("shadow-ok-private" if private else "shadow-ok", text, scope, *also_reads)
    if engine.caches.sql.get(key) == loaded_at:
        return
    view = engine.view(scope or None)
    visible = frozenset(view.tables) | frozenset(view.public_tables)
    check_shadowing(tree, shadows, also_reads, visible, private)
    engine.caches.sql.remember(key, loaded_at)


def checked(engine: EngineContext, text: str, scope: str = "") -> bool:
    """Whether statement ``text`` (prepared under ``scope``) passed :func:`check` against the
    current shadows (no I/O)."""
    hit = _current(engine)
    return hit is not None and engine.caches.sql.get(("shadow-ok", text, scope)) == hit[0]
