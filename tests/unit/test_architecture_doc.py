"""docs/architecture.md names the code as it is (issue 18: a newcomer follows a statement from
socket to socket with it).

Every dotted name in backticks, or anywhere in the diagram, that starts with one of dpsql's
top-level modules or packages (`wire.session`, `execute.backend.Backend.run`, `dp.rng`), or with
``dpsql.``, ``psycopg.`` or ``psycopg_pool.``, must import as a module or resolve as an attribute
of one; every file or folder
path in backticks (`execute/prepare.py`, `server/`) must exist under dpsql/ or the repository. A
module renamed, moved or deleted without the map fixed fails here, with the stale names listed.
Every package's ``__init__`` says what the package owns (a docstring of a sentence at least).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import dpsql

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
TOP = {m.name for m in pkgutil.iter_modules(dpsql.__path__)}
OTHERS = ("dpsql", "psycopg", "psycopg_pool")
DOTTED = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)`")
PATH = re.compile(r"`([\w./-]*(?:\.py|/))`")
FENCE = re.compile(r"^```\n(.*?)^```", re.S | re.M)
BARE = re.compile(r"(?<![\w.])([a-z_]\w*(?:\.[A-Za-z_]\w*)+)")


def resolves(name: str) -> bool:
    """Whether ``name`` is a module, or an attribute chain on the longest module it starts with."""
    parts = name.split(".")
    if parts[0] not in OTHERS:
        parts = ["dpsql", *parts]
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def names(text: str) -> set[str]:
    """The dotted names in backticks, and every dotted name in the diagram (fenced blocks)."""
    found = set(DOTTED.findall(text))
    for block in FENCE.findall(text):
        found |= set(BARE.findall(block))
    return {n for n in found if n.split(".")[0] in TOP | set(OTHERS) and not n.endswith(".py")}


def stale(text: str) -> list[str]:
    bad = sorted(n for n in names(text) if not resolves(n))
    paths = PATH.findall(text)
    bad += sorted(p for p in paths if not (ROOT / "dpsql" / p).exists() and not (ROOT / p).exists())
    return bad


def test_the_map_names_what_exists() -> None:
    text = DOC.read_text()
    assert len(names(text)) >= 40  # the check reads the map (a changed backtick style would not)
    assert stale(text) == []


def test_a_stale_name_is_caught() -> None:
    twin = (
        "`wire.session` `execute.backend.Backend.nope` `wire.gone` `execute/gone.py` `dp.rng`\n"
        "```\nclient socket\n  wire.conn ── wire.framing2   bytes → frames\n```\n"
    )
    assert stale(twin) == [
        "execute.backend.Backend.nope",
        "wire.framing2",
        "wire.gone",
        "execute/gone.py",
    ]


def packages() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(dpsql.__path__, "dpsql.") if m.ispkg) + [
        "dpsql"
    ]


def test_every_package_says_what_it_owns() -> None:
    assert len(packages()) >= 10
    silent = [p for p in packages() if len((importlib.import_module(p).__doc__ or "").split()) < 8]
    assert silent == []
