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
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, Unpack

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
    return copy.deepcopy(_demo_doc())


@functools.cache
def _demo_doc() -> Doc:
    """The demo policy's file parsed once per test process (callers get deep copies: ~0.1 CPU-s
    a parse, called at import by a score of test modules)."""
    from dpsql.demo import POLICY

    doc: Doc = yaml.safe_load(Path(POLICY).read_text())
    return doc


class TableKeys(TypedDict, total=False):
    """A private table's keys besides its unit and columns (the policy's names)."""

    max_rows_per_unit: int | str
    max_groups_per_unit: int | str
    max_rows_per_unit_total: int
    auto_max_rows_per_unit: int
    auto_max_groups_per_unit: int


def demo_table(
    name: str, columns: Mapping[str, Mapping[str, Any]] | None = None, **keys: Unpack[TableKeys]
) -> Doc:
    """The demo policy's table ``name`` (``public.purchases``, ``public.pums``) with ``keys`` set
    and the ``columns`` given replacing its own (the others kept, in order)::

        make_policy("total", add_tables={"public.pums": demo_table("public.pums",
                    max_rows_per_unit_total=4, columns={"age": {"type": "integer"}})})
    """
    table: Doc = demo_doc()["tables"][name]
    table.update(copy.deepcopy(dict(keys)))
    table["columns"] = {**table["columns"], **copy.deepcopy(dict(columns or {}))}
    return table


def private_table(
    unit: str,
    columns: Mapping[str, Mapping[str, Any]],
    *,
    rows: int | str | None = 1,
    groups: int | str | None = 1,
    unit_type: str = "integer",
    rows_total: int | None = None,
    auto_max_rows: int | None = None,
    auto_max_groups: int | None = None,
) -> Doc:
    """A private table's entry: its privacy unit ``unit`` (an identifier column of ``unit_type``,
    listed first; ``"row"``: each row is its own unit, no column), then ``columns``; at most
    ``rows`` rows and ``groups`` groups per unit (``None``: the key is left out, the policy's
    default applies: ``auto``); ``rows_total``: ``max_rows_per_unit_total`` (rows over all its
    groups), ``auto_max_rows`` / ``auto_max_groups``: the top of ``auto``'s grids (left out:
    the defaults)."""
    bounds = {
        "max_rows_per_unit": rows,
        "max_groups_per_unit": groups,
        "max_rows_per_unit_total": rows_total,
        "auto_max_rows_per_unit": auto_max_rows,
        "auto_max_groups_per_unit": auto_max_groups,
    }
    unit_column = {} if unit == "row" else {unit: {"type": unit_type, "identifier": True}}
    return {
        "privacy_unit": unit,
        **{k: v for k, v in bounds.items() if v is not None},
        "columns": {**unit_column, **copy.deepcopy(dict(columns))},
    }


class DocArgs(TypedDict, total=False):
    """What a test says about its policy (:func:`policy_doc`'s arguments, typed)."""

    base: Mapping[str, Any]  # the document to start from; default the demo policy; {}: nothing
    tables: Mapping[str, Mapping[str, Any]]  # the private tables (replacing base's)
    add_tables: Mapping[str, Mapping[str, Any]]  # private tables added to base's
    public_tables: Sequence[str]  # the public tables (replacing base's)
    add_public_tables: Sequence[str]  # public tables added to base's
    analysts: Mapping[str, Mapping[str, Any]]  # the analysts (replacing base's)
    fixed_bounds: bool  # fix every ``auto`` contribution bound (:func:`fixed_bounds_doc`)
    # top-level keys, set as given (Policy's fields)
    version: int
    dataset: str
    defaults: Mapping[str, Any]  # epsilon, max_epsilon, delta, confidence, ...
    budget: Mapping[str, Any]  # the dataset's global budget
    repeats: str
    timing: Mapping[str, Any]
    server: Mapping[str, Any]


_TOP = ("version", "dataset", "defaults", "budget", "repeats", "timing", "server")


def policy_doc(**kw: Unpack[DocArgs]) -> Doc:
    """A policy document: ``base`` (default: the demo policy; ``base={}`` for none) with its
    private tables replaced by ``tables`` and/or extended by ``add_tables``, its public tables
    replaced by ``public_tables`` and/or extended by ``add_public_tables``, its analysts replaced
    by ``analysts``, and the top-level keys given (``dataset=``, ``defaults=``, ``budget=``,
    ``timing=``, ...) set."""
    unknown = set(kw) - set(DocArgs.__annotations__)
    assert not unknown, f"policy_doc: unknown arguments {sorted(unknown)}"
    base = kw.get("base")
    doc: Doc = copy.deepcopy(dict(base)) if base is not None else demo_doc()
    if (tables := kw.get("tables")) is not None:
        doc["tables"] = copy.deepcopy(dict(tables))
    if add_tables := kw.get("add_tables"):
        doc["tables"] = {**(doc.get("tables") or {}), **copy.deepcopy(dict(add_tables))}
    if (public_tables := kw.get("public_tables")) is not None:
        doc["public_tables"] = list(public_tables)
    if add_public := kw.get("add_public_tables"):
        doc["public_tables"] = [*(doc.get("public_tables") or []), *add_public]
    if (analysts := kw.get("analysts")) is not None:
        doc["analysts"] = copy.deepcopy(dict(analysts))
    doc.update(copy.deepcopy({k: kw[k] for k in _TOP if k in kw}))  # type: ignore[literal-required]
    return fixed_bounds_doc(doc) if kw.get("fixed_bounds") else doc


def build_policy(**kw: Unpack[DocArgs]) -> Policy:
    """:func:`policy_doc` (same arguments) parsed as a policy file's text is, without a file."""
    return parse_policy(yaml.safe_dump(policy_doc(**kw), sort_keys=False), "<test policy>")


def one_table_policy(
    dataset: str,
    table: str,
    columns: Mapping[str, Mapping[str, Any]],
    *,
    rows: int | None = None,
    groups: int | None = None,
) -> Policy:
    """A policy of one private table ``table`` (privacy unit ``uid``, then ``columns``; ``rows``
    and ``groups`` per unit, None: ``auto``) and no public one, read by the demo's ``analyst``:
    epsilon 1 a statement (10 at most), delta 1e-6, every ``auto`` bound fixed (R = G = 1) and
    every bounded column clamped (:func:`fixed_bounds_doc`)."""
    return build_policy(
        base={"version": 1},
        dataset=dataset,
        defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
        tables={table: private_table("uid", columns, rows=rows, groups=groups)},
        analysts={"analyst": demo_doc()["analysts"]["analyst"]},
        fixed_bounds=True,
    )


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

    def __call__(self, name: str = "policy", **kw: Unpack[DocArgs]) -> PolicyFile:
        doc = policy_doc(**kw)
        path = self.tmp.mktemp("policy") / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return PolicyFile(path, doc, load_policy(path))
