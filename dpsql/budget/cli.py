"""``dpsql budget show|grant|reset``: registered on the main CLI (see dpsql.cli._extensions)."""

from __future__ import annotations

from typing import Any

from dpsql.budget.admin import add_parser


def register(sub: Any) -> None:
    """Add the ``budget`` subcommand to the CLI's subparsers."""
    add_parser(sub)
