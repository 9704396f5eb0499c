"""Text held back while it may still turn out to be the start of a tag (a stop string, a tool
call's opening, the end of a thinking model's reasoning), so that what goes out to a client
never has to be taken back."""
from __future__ import annotations


def tag_start(text: str, tag: str) -> int:
    """How many of `text`'s last characters begin `tag` (fewer than all of it)."""
    return max((n for n in range(len(tag) - 1, 0, -1) if text.endswith(tag[:n])), default=0)
