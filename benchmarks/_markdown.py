"""What a benchmark script does with its markdown section: print it, and append it to a docs file when asked."""

from __future__ import annotations


def emit(text: str, append: str | None = None) -> None:
    """Print ``text``; append it (after a blank line) to the file ``append`` too when given."""
    print(text)
    if append:
        with open(append, "a", encoding="utf-8") as fh:
            fh.write("\n" + text)
