"""What differs between two scenario dumps, field by field, as YAML writes the values
(a resumed run's scenario against the one it was started with, a sweep point's
against the one already in its folder).
"""

from __future__ import annotations

from sflsim.text import as_yaml

#: a field that one of two scenario dumps lacks (another algorithm's field)
_ABSENT = object()


def scenario_differences(old: object, new: object, path: str = "") -> list[str]:
    """``"a.b: 1 before, null now"`` for every leaf of two scenario dumps that differs,
    values as YAML writes them (``null``, ``true``, text unquoted), a field that one
    side lacks as ``not set``."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            out += scenario_differences(old.get(key, _ABSENT), new.get(key, _ABSENT),
                                        f"{path}.{key}" if path else str(key))
        return out
    return [] if old == new else [f"{path}: {_yaml(old)} before, {_yaml(new)} now"]


def _yaml(value: object) -> str:
    """``value`` as YAML writes it in flow style, on one line (``not set`` for a field
    that is not there)."""
    return "not set" if value is _ABSENT else as_yaml(value)
