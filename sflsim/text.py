"""Counts in the text sflsim prints: ``1 round``, ``2 rounds`` (one rule, used everywhere)."""

from __future__ import annotations

_ES_ENDINGS = ("s", "x", "z", "ch", "sh")
#: words ending in a hard "ch" (said "k"): plural in -s
_HARD_CH = ("epoch", "stomach", "monarch")


def plural(n: float, noun: str, many: str | None = None, spec: str = "") -> str:
    """``n`` and ``noun``, with the noun's last word in the plural unless ``n`` is 1.

    ``plural(1, "round")`` is ``"1 round"``, ``plural(3, "training sample")`` is
    ``"3 training samples"``, ``plural(2, "batch")`` is ``"2 batches"``,
    ``plural(12000, "image", spec=",")`` is ``"12,000 images"``.

    Args:
        n: the count (any number; only exactly 1 takes the singular).
        noun: the singular, one word or a phrase whose last word is the counted noun.
        many: the whole plural phrase where the English rule below does not give it
            (``plural(n, "GPU")`` needs none; ``plural(n, "datum", "data")`` does).
        spec: format spec of the number (``","``, ``".1f"``); default ``str``.
    """
    number = format(n, spec)
    if n == 1:
        return f"{number} {noun}"
    if many is None:
        head, _, last = noun.rpartition(" ")
        if last.endswith(_ES_ENDINGS) and not last.endswith(_HARD_CH):
            last += "es"
        elif len(last) > 1 and last.endswith("y") and last[-2] not in "aeiou":
            last = last[:-1] + "ies"
        else:
            last += "s"
        many = f"{head} {last}" if head else last
    return f"{number} {many}"


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """``"; did you mean 'client_energy_j'?"`` for the choice closest to ``word`` (by
    spelling, else the one choice that holds ``word`` as a part of its name:
    ``energy`` -> ``client_energy_j``), or ``""`` when none is close."""
    import difflib
    import re

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if not close and word:
        parts = {c: re.split(r"[_.\-]", c.lower()) for c in choices}
        close = [c for c in choices if word.lower() in parts[c]] or \
            [c for c in choices if word.lower() in c.lower()]
        close = close[:1] if len(close) == 1 else []
    return f"; did you mean {close[0]!r}?" if close else ""


def as_yaml(value: object) -> str:
    """``value`` as YAML writes it in flow style, on one line: ``null``, ``true``, ``1.5``,
    text unquoted where YAML allows, ``{a: 1}``, ``[1, 2]``."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"), sort_keys=False)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def as_written(cell: str) -> str:
    """A table cell (text as read from a CSV file) as a message shows it, as written: a
    number, ``nan``, ``inf`` or true/false bare (``2.5``, ``-inf``, ``true``), other
    text quoted (``'fast'``, ``'5 Mbit/s'``)."""
    cell = cell.strip()
    try:
        float(cell)
    except ValueError:
        return cell if cell.lower() in ("true", "false") else repr(cell)
    return cell


def span(low: int, high: int) -> str:
    """``"1 to 5"``, or ``"1"`` where the two are one (no "1 to 1")."""
    return f"{low}" if low == high else f"{low} to {high}"


def valid_range(noun: str, low: int, high: int) -> str:
    """``"valid end layers: 1 to 5"``; ``"valid end layer: 1"`` where there is one choice."""
    if low == high:
        return f"valid {noun}: {low}"
    nouns = plural(2, noun).split(" ", 1)[1]  # the plural without its count
    return f"valid {nouns}: {low} to {high}"
