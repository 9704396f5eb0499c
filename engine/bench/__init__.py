"""Benchmarks mounted under `swarmscope bench NAME`; each reports ratios measured in one run."""


def in_turn(items, turn: int):
    """`items` starting at position `turn` (wrapping): in lockstep runs who goes first rotates,
    so no policy always follows another."""
    turn %= len(items)
    return items[turn:] + items[:turn]
