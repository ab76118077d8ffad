"""The one strict YAML reader: every YAML file and ``KEY=VALUE`` value a user writes goes through
:func:`parse_yaml` / :func:`read_yaml` (env configs, eval configs, run settings, ``--env-kwargs``).

Strict: UTF-8, no key given twice in one mapping, ``yaml.SafeLoader`` (no Python objects). Bounded (issue
#30): text over :data:`MAX_YAML_BYTES`, nesting deeper than ``MAX_VALUE_DEPTH`` (checked before PyYAML's
scanner, which is quadratic in a run of ``[``), integers of more digits than ``MAX_INT_BITS`` allow, and
aliases that expand beyond ``MAX_VALUE_NODES`` items are each a ``ValueError`` naming the field.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional, Union

from .sim.limits import MAX_INT_BITS, MAX_VALUE_DEPTH, TooLongInteger, check_value_shape, short

_YAML_LOADER: list = []
#: The longest YAML text read (a file or a KEY=VALUE value): 4 MiB holds per-client lists of 100,000 clients.
MAX_YAML_BYTES = 4 << 20


def _strict_yaml_loader() -> type:
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last silently)."""
    if not _YAML_LOADER:
        import yaml

        class StrictLoader(yaml.SafeLoader):
            def compose_node(self, parent, index):  # nesting counted as it is read: no RecursionError
                path = self.__dict__.setdefault("_path", [])
                path.append(index.value if isinstance(index, yaml.ScalarNode) else None)  # a mapping's key
                try:
                    if len(path) > MAX_VALUE_DEPTH + 1:
                        field = ".".join(str(k) for k in path if k is not None)
                        raise yaml.composer.ComposerError(
                            None, None, (f"config field {short(field)} " if field else "") + f"is nested more than "
                            f"{MAX_VALUE_DEPTH} levels deep (a config value is a number, a string, or a short "
                            f"list or mapping)", self.peek_event().start_mark)
                    return super().compose_node(parent, index)
                finally:
                    path.pop()

            def construct_yaml_int(self, node):  # Python reads no int of over 4,300 digits: refused by field
                digits = sum(c.isdigit() for c in str(node.value))
                if digits > MAX_INT_BITS * 0.30103:
                    return TooLongInteger(digits)
                return super().construct_yaml_int(node)

            def construct_mapping(self, node, deep=False):
                if isinstance(node, yaml.MappingNode):
                    seen = set()
                    for key_node, _ in node.value:
                        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` then overrides is fine
                            continue
                        key = self.construct_object(key_node, deep=True)
                        try:
                            duplicate = key in seen
                        except TypeError:  # an unhashable key: SafeLoader's own error follows
                            continue
                        if duplicate:
                            raise yaml.constructor.ConstructorError(
                                "while constructing a mapping", node.start_mark,
                                f"found key {key!r} twice (remove one)", key_node.start_mark)
                        seen.add(key)
                return super().construct_mapping(node, deep)

        StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
        _YAML_LOADER.append(StrictLoader)
    return _YAML_LOADER[0]


def _yaml_problem(e: Exception) -> str:
    """A YAML error as one line: what is wrong and where (line and column, 1-based)."""
    problem = getattr(e, "problem", None) or str(e)
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    context = getattr(e, "context", None)
    return f"{problem}{where}" + (f" ({context})" if context else "")


_TOP_KEY = re.compile(r"([A-Za-z_][\w.-]*)\s*:")


def _flow_too_deep(text: str) -> int:
    """Where ``[`` / ``{`` outside quotes first nest deeper than ``MAX_VALUE_DEPTH`` + 1 (-1: nowhere)."""
    depth, quote = 0, ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
            if depth > MAX_VALUE_DEPTH + 1:
                return i
        elif ch in "]}":
            depth = max(depth - 1, 0)
        elif ch == "\n" and depth == 0:
            quote = ""
    return -1


def parse_yaml(text: str, what: str, field: Optional[str] = None) -> Any:
    """The value of YAML ``text`` (a file's contents or a ``KEY=VALUE`` value), read strictly.

    :param what: what the text is, named in errors (e.g. ``"config file 'env.yml'"``).
    :param field: the config field the text is the value of (a ``KEY=VALUE`` item's key), named in errors;
        None: a whole document, whose top-level keys are the fields.
    :raises ValueError: for a syntax error (where it is) or a key given twice, naming ``what``; for text
        over :data:`MAX_YAML_BYTES`, nesting deeper than ``MAX_VALUE_DEPTH``, an integer of more than
        ``MAX_INT_BITS`` bits, or aliases that expand beyond ``MAX_VALUE_NODES`` (naming the field).
    """
    import yaml

    if len(text) > MAX_YAML_BYTES:
        raise ValueError(f"{what} is {len(text):,} characters long, over the {MAX_YAML_BYTES:,} a config may be; "
                         f"write a smaller one")
    deep_at = _flow_too_deep(text)  # PyYAML scans a run of '[' in quadratic time before it composes anything
    if deep_at >= 0:
        line = text.count("\n", 0, deep_at)
        top = next((m.group(1) for m in map(_TOP_KEY.match, reversed(text[:deep_at].split("\n"))) if m), None)
        name = field or top
        raise ValueError(f"{what} is not valid YAML: " + (f"config field {short(name)} " if name else "")
                         + f"is nested more than {MAX_VALUE_DEPTH} levels deep at line {line + 1} (a config value is "
                         f"a number, a string, or a short list or mapping); correct it there")
    try:
        data = yaml.load(text, Loader=_strict_yaml_loader())
    except yaml.YAMLError as e:
        raise ValueError(f"{what} is not valid YAML: {_yaml_problem(e)}; correct it there") from None
    if field is not None:
        check_value_shape(data, field)
    elif isinstance(data, dict):
        for key, value in data.items():  # an alias bomb is refused here, before anything expands it
            check_value_shape(value, key if isinstance(key, str) else short(key))
    else:
        check_value_shape(data, "", what=what)
    return data


def read_yaml(path: Union[str, Path], what: str = "YAML file") -> Any:
    """The YAML document in file ``path``, read strictly (UTF-8, no key twice in one mapping).

    :param what: what the file is, named in errors (``"config file"``, ``"eval config file"``, ...).
    :raises ValueError: naming the file and the fix when it is missing or unreadable, not UTF-8 text,
        not valid YAML (with the line and column) or gives a key twice.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {str(p)!r} does not exist")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read {what} {str(p)!r}: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} {str(p)!r} is not UTF-8 text (byte {e.start} is {raw[e.start:e.start + 1]!r}): "
                         f"save it as UTF-8") from None
    return parse_yaml(text, f"{what} {str(p)!r}")


__all__ = ["MAX_YAML_BYTES", "parse_yaml", "read_yaml"]
