"""Policies for tests: one builder instead of one per module.

``policy_doc`` builds a policy document (YAML as dicts) from the demo policy or from scratch,
``private_table`` one private table's entry, ``build_policy`` parses such a document (no file); the
``make_policy`` fixture (tests/conftest.py) writes it to a file and loads it, as
``dpsql serve --policy FILE`` would::

    def test_x(make_policy: PolicyMaker) -> None:
        pf = make_policy(
            "t", tables={"public.t": private_table("u", {"x": {"type": "integer", "bounds": [0, 1]}})}
        )
        engine = Engine(pf.policy, dsn)          # or pf.path for a server process

Nothing is implied: bounds stay what the caller wrote (``fixed_bounds=True`` fixes the demo's
``auto`` contribution bounds, see :func:`fixed_bounds_doc`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dpsql.policy import load_policy, parse_policy
from dpsql.policy.model import Policy

Doc = dict[str, Any]

# The demo policy's contribution bounds before they became ``auto`` (chosen per query): tests of
# other features run on these fixed numbers, so their answers and charges stay reproducible.
DEMO_FIXED_BOUNDS = {"public.purchases": (25, 5), "public.pums": (1, 1)}


def demo_doc() -> Doc:
    """The demo policy as shipped (``dpsql/demo/policy.yaml``), as a fresh document."""
    from dpsql.demo import POLICY

    doc: Doc = yaml.safe_load(Path(POLICY).read_text())
    return doc


def private_table(
    unit: str,
    columns: Mapping[str, Mapping[str, Any]],
    *,
    rows: int | str | None = 1,
    groups: int | str | None = 1,
    unit_type: str = "integer",
) -> Doc:
    """A private table's entry: its privacy unit ``unit`` (an identifier column of ``unit_type``,
    listed first), then ``columns``; at most ``rows`` rows and ``groups`` groups per unit
    (``None``: the key is left out, the policy's default applies: ``auto``)."""
    bounds = {"max_rows_per_unit": rows, "max_groups_per_unit": groups}
    return {
        "privacy_unit": unit,
        **{k: v for k, v in bounds.items() if v is not None},
        "columns": {unit: {"type": unit_type, "identifier": True}, **copy.deepcopy(dict(columns))},
    }


def policy_doc(
    *,
    base: Mapping[str, Any] | None = None,
    tables: Mapping[str, Mapping[str, Any]] | None = None,
    add_tables: Mapping[str, Mapping[str, Any]] | None = None,
    public_tables: Sequence[str] | None = None,
    add_public_tables: Sequence[str] = (),
    analysts: Mapping[str, Mapping[str, Any]] | None = None,
    fixed_bounds: bool = False,
    **top: Any,
) -> Doc:
    """A policy document: ``base`` (default: the demo policy) with its private tables replaced by
    ``tables`` and/or extended by ``add_tables``, its public tables replaced by ``public_tables``
    and/or extended by ``add_public_tables``, its analysts replaced by ``analysts``, and any other
    top-level key set from ``top`` (``dataset=``, ``defaults=``, ``server=``, ``timing=``, ...)."""
    doc: Doc = copy.deepcopy(dict(base)) if base is not None else demo_doc()
    if tables is not None:
        doc["tables"] = copy.deepcopy(dict(tables))
    if add_tables:
        doc["tables"] = {**(doc.get("tables") or {}), **copy.deepcopy(dict(add_tables))}
    if public_tables is not None:
        doc["public_tables"] = list(public_tables)
    if add_public_tables:
        doc["public_tables"] = [*(doc.get("public_tables") or []), *add_public_tables]
    if analysts is not None:
        doc["analysts"] = copy.deepcopy(dict(analysts))
    doc.update(copy.deepcopy(top))
    return fixed_bounds_doc(doc) if fixed_bounds else doc


def build_policy(**kw: Any) -> Policy:
    """:func:`policy_doc` (same arguments) parsed as a policy file's text is, without a file."""
    return parse_policy(yaml.safe_dump(policy_doc(**kw), sort_keys=False), "<test policy>")


def fixed_bounds_doc(doc: dict[str, Any]) -> dict[str, Any]:
    """A policy document (YAML as dicts) with every ``auto`` contribution bound fixed: the demo
    tables' former numbers (others: 1) and ``clamp: bounds`` on every bounded column."""
    out = dict(doc)
    tables = {}
    for name, t in (doc.get("tables") or {}).items():
        key = name if "." in name else f"public.{name}"
        r, g = DEMO_FIXED_BOUNDS.get(key, (1, 1))
        t = dict(t)
        if t.get("max_rows_per_unit", "auto") == "auto" and t.get("privacy_unit") != "row":
            t["max_rows_per_unit"] = r
        if t.get("max_groups_per_unit", "auto") == "auto":
            t["max_groups_per_unit"] = g
        t["columns"] = {
            c: {**v, "clamp": "bounds"} if v.get("bounds") and "clamp" not in v else v
            for c, v in t["columns"].items()
        }
        tables[name] = t
    out["tables"] = tables
    return out


def fixed_demo_policy() -> Policy:
    """The demo policy with its former fixed contribution bounds (:data:`DEMO_FIXED_BOUNDS`)."""
    return build_policy(fixed_bounds=True)


@dataclass(frozen=True)
class PolicyFile:
    """A policy written to ``path`` (YAML of ``doc``) and loaded from it."""

    path: Path
    doc: Doc
    policy: Policy


@dataclass(frozen=True)
class PolicyMaker:
    """The ``make_policy`` fixture: ``make_policy(name, ...)`` (the arguments of
    :func:`policy_doc`) writes ``<tmp>/<name>.yaml`` and loads it (an invalid policy fails here)."""

    tmp: pytest.TempPathFactory

    def __call__(
        self,
        name: str = "policy",
        *,
        base: Mapping[str, Any] | None = None,
        tables: Mapping[str, Mapping[str, Any]] | None = None,
        add_tables: Mapping[str, Mapping[str, Any]] | None = None,
        public_tables: Sequence[str] | None = None,
        add_public_tables: Sequence[str] = (),
        analysts: Mapping[str, Mapping[str, Any]] | None = None,
        fixed_bounds: bool = False,
        **top: Any,
    ) -> PolicyFile:
        doc = policy_doc(
            base=base, tables=tables, add_tables=add_tables, public_tables=public_tables,
            add_public_tables=add_public_tables, analysts=analysts, fixed_bounds=fixed_bounds,
            **top,
        )  # fmt: skip
        path = self.tmp.mktemp("policy") / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return PolicyFile(path, doc, load_policy(path))
