"""Refuse a sweep that gives a field and a field inside it (``training`` and
``training.rounds``) among its axes, ``set`` entries and ``--set`` overrides.

A value of ``training`` replaces the whole ``training`` section of a point, so with
``training.rounds`` beside it one of them silently overrides the other (which one
depends on the order they are applied in), while the point is labelled with both.
"""

from __future__ import annotations

from collections.abc import Iterable

from sflsim.errors import ConfigError


def _keys(path: str) -> tuple[str, ...]:
    """A dotted path as its components, spaced as ``--set`` reads them."""
    return tuple(k.strip() for k in path.strip().split("."))


def check_nested_paths(set_paths: Iterable[str], axes: Iterable[str], where: str,
                       cli_set: dict[str, str] | None = None) -> None:
    """Refuse two overrides of which one lies inside the other, by dotted components
    (``devices`` and ``devices.pi.count``; ``seed`` and ``seeds``, or
    ``training.rounds`` and ``training.rounds_x``, only share text and pass), whether
    each is an axis (``axes``), a ``set`` entry of the file (``set_paths``) or a
    ``--set`` (those of ``set_paths`` in ``cli_set``, as in
    :func:`sflsim.sweep.spec.expand`). A path both in ``set`` and in ``axes`` is left
    to the caller's own message.

    Raises:
        ConfigError: naming both paths, where each comes from and what to write instead.
    """
    cli_set = cli_set or {}
    entries = [(path, f"--set {cli_set[path]}" if path in cli_set else f"set {path!r}")
               for path in set_paths]
    entries += [(path, f"axis {path!r}") for path in axes]
    for i, (first, first_label) in enumerate(entries):
        for second, second_label in entries[i + 1:]:
            a, b = _keys(first), _keys(second)
            if a == b or (a[:len(b)] != b and b[:len(a)] != a):
                continue
            (parent, parent_label), (child, child_label) = sorted(
                ((first, first_label), (second, second_label)), key=lambda e: len(_keys(e[0])))
            _refuse(parent, parent_label, child, child_label, where)


def _refuse(parent: str, parent_label: str, child: str, child_label: str, where: str) -> None:
    inner = ".".join(_keys(child)[len(_keys(parent)):])
    value = "{" + ": {".join(inner.split(".")) + ": ...}" + "}" * inner.count(".")
    example = (f"--set '{parent}={value}'" if parent_label.startswith("--set ")
               else f"{parent}: [{value}, ...]" if parent_label.startswith("axis ")
               else f"{parent}: {value}")
    raise ConfigError(
        f"{where}: {child_label} lies inside {parent_label}, whose value replaces the whole "
        f"{parent!r} mapping, so one of the two would silently override the other; give "
        f"{inner} inside the value of {parent!r} (e.g. {example}), or leave {parent!r} out "
        f"and give only dotted paths below it, such as {child!r}")
