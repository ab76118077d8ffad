"""The ``KEY=VALUE,...`` syntax of ``--policy``, ``--aggregator`` and ``--env-kwargs`` values.

Owns reading parameter lists (values read as YAML) and the labels built from them; nothing here
knows what the parameters are for.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Sequence, Union

from fedsel_env.config import parse_yaml
from fedsel_env.sim.limits import short


def split_items(text: str) -> List[str]:
    """Split ``"a=1,b=[1, 2],c=x"`` at the commas outside brackets."""
    items, depth, cur = [], 0, []
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return [i.strip() for i in items if i.strip()]


def parse_params(items: Union[str, Sequence[str]], what: str) -> Dict[str, Any]:
    """``"v=10,beta=0.1"`` (or ``["v=10", "beta=0.1"]``) → ``{"v": 10, "beta": 0.1}``, values read as YAML.

    :param what: what the parameters are for, named in errors.
    :raises ValueError: for an item that is not ``KEY=VALUE`` or a key given twice.
    """
    if isinstance(items, str):
        items = split_items(items)
    out: Dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"bad parameter {short(item)} for {what}: expected KEY=VALUE with KEY a name "
                             f"(e.g. 'v=10,beta=0.1')")
        if key in out:
            raise ValueError(f"parameter {key!r} given twice for {what}")
        out[key] = parse_yaml(value, f"value {short(value)} of parameter {key!r} for {what}", field=key) if value.strip() else None
    return out


def label(name: str, params_text: str) -> str:
    """``name(params_text)``, or ``name`` when there are no parameters."""
    return f"{name}({params_text})" if params_text else name


__all__ = ["label", "parse_params", "split_items"]
