"""YAML -> Policy, with errors that name the file, the line and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dpsql.errors import PolicyError
from dpsql.policy.model import Policy


def _lines(node: yaml.Node, path: tuple[Any, ...], out: dict[tuple[Any, ...], int]) -> None:
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = k.value
            out[(*path, key)] = k.start_mark.line + 1
            _lines(v, (*path, key), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _lines(v, (*path, i), out)


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Parse and validate policy YAML text."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise PolicyError(f"{where}: not valid YAML: {getattr(e, 'problem', e)}") from e
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: a policy is a mapping with `tables:`, `analysts:` ...")
    lines: dict[tuple[Any, ...], int] = {}
    if node is not None:
        _lines(node, (), lines)
    try:
        return Policy.model_validate(data)
    except ValidationError as e:
        msgs = []
        errors = sorted(e.errors(), key=lambda x: x["type"] != "extra_forbidden")
        for err in errors:
            loc = tuple(err["loc"])
            line = None
            probe = loc
            while probe and line is None:
                line = lines.get(probe)
                probe = probe[:-1]
            field = ".".join(str(p) for p in loc) or "(top level)"
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown field (check the spelling; see policies/demo.yaml for the fields)"
            msgs.append(f"{source}:{line or 1}: {field}: {msg}")
        raise PolicyError(
            msgs[0],
            detail="\n".join(msgs) if len(msgs) > 1 else None,
            hint="fix the policy file and run `dpsql check` again",
        ) from e


def load_policy(path: str | Path) -> Policy:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise PolicyError(f"can't read policy file {p}: {e.strerror}") from e
    return parse_policy(text, str(p))
