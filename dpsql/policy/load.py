"""YAML -> Policy, with errors that name the file, the line and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dpsql.errors import PolicyError
from dpsql.policy.model import Policy
from dpsql.policy.settings import SERVER_KEYS, UnsetVariable, interpolate


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
    loader = yaml.SafeLoader(text)
    try:  # parsed once: the nodes (their lines, for errors) and the data built from them
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise PolicyError(f"{where}: not valid YAML: {getattr(e, 'problem', e)}") from e
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: a policy is a mapping with `tables:`, `analysts:` ...")
    lines: dict[tuple[Any, ...], int] = {}
    if node is not None:
        _lines(node, (), lines)
    unresolved = _interpolate_server(data, lines, source)
    try:
        policy = Policy.model_validate(data)
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
            if not loc:  # a check of the whole policy names its field first: "tables.x.y: ..."
                named, at = _named_field(msg, lines)
                if named is not None:
                    field, msg, line = named, msg[len(named) + 2 :], at
            if err["type"] == "extra_forbidden":
                msg = "unknown field (check the spelling; see docs/policy.md for the fields)"
            msgs.append(f"{source}:{line or 1}: {field}: {msg}")
        raise PolicyError(
            msgs[0],
            detail="\n".join(msgs) if len(msgs) > 1 else None,
            hint="fix the policy file and run `dpsql check` again",
        ) from e
    if policy.server is not None:
        policy.server._unresolved.update(unresolved)
        for key in policy.server.model_fields_set:
            policy.server._where[key] = f"{source}:{lines.get(('server', key), 1)}"
    return policy


def _named_field(
    msg: str, lines: dict[tuple[Any, ...], int]
) -> tuple[str, int] | tuple[None, None]:
    """The field a whole-policy check's message starts with (``tables.public.purchases.columns.
    region: keys_from ...``) and its line in the file, when the file has that field (table names
    hold dots, so the path is matched whole against the file's own)."""
    head, sep, _ = msg.partition(": ")
    if not sep:
        return None, None
    for loc, line in lines.items():
        if head in (".".join(str(p) for p in loc), ".".join(_qualified(loc))):
            return head, line
    return None, None


def _qualified(loc: tuple[Any, ...]) -> list[str]:
    """``loc`` with a table written without its schema (``tables.people``) qualified as the
    policy names it (``tables.public.people``)."""
    parts = [str(p) for p in loc]
    if len(parts) > 1 and parts[0] in ("tables", "public_tables") and "." not in parts[1]:
        parts[1] = f"public.{parts[1]}"
    return parts


def _interpolate_server(
    data: dict[str, Any], lines: dict[tuple[Any, ...], int], source: str
) -> dict[str, str]:
    """Expand ``${VAR}`` in the string values of ``server:`` (in place).

    A key whose variable is unset (no ``:-default``) is dropped and returned with a message: it is
    an error only if ``dpsql serve`` needs it (no flag or environment variable gives that setting),
    so `dpsql query` and a serve with ``--upstream`` still work. An empty string counts as unset.
    Values are never echoed (they may be secrets).
    """
    server = data.get("server")
    if not isinstance(server, dict):
        return {}
    unresolved: dict[str, str] = {}
    for key, value in list(server.items()):
        if not isinstance(value, str) or key not in SERVER_KEYS:  # unknown keys: refused below
            continue
        where = f"{source}:{lines.get(('server', key), 1)}: server.{key}"
        try:
            server[key] = interpolate(value)
            if server[key] == "":  # like an empty environment variable: not set
                del server[key]
        except UnsetVariable as e:
            del server[key]
            unresolved[str(key)] = (
                f"{where}: environment variable {e.name} is not set (write ${{{e.name}:-default}} "
                "for a default)"
            )
        except ValueError as e:
            raise PolicyError(
                f"{where}: {e}", hint="fix the policy file and run `dpsql check` again"
            ) from None
    return unresolved


def load_policy(path: str | Path) -> Policy:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise PolicyError(f"can't read policy file {p}: {e.strerror}") from e
    return parse_policy(text, str(p))
