"""``argparse`` value types the command-line tools share (``ovserve export``, ``ovserve parse``).

Each one turns a flag's text into its value or raises :class:`argparse.ArgumentTypeError`, whose
message argparse prints after the flag's name (``--chunk: expected a positive integer, got 0``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

_WHAT = {0: "a non-negative integer", 1: "a positive integer"}


def int_at_least(minimum: int) -> Callable[[str], int]:
    """A whole number of at least ``minimum``; the message says which (and what was given)."""
    what = _WHAT.get(minimum, f"an integer of at least {minimum}")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse
