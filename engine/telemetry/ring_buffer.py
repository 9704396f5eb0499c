"""A bounded, thread-safe buffer of records with sequence numbers.

The engine appends from its worker thread; the window's timer asks for everything since the last
sequence number it saw, so a redraw copies only what is new (never the whole history)."""
from __future__ import annotations

import threading
from collections import deque
from typing import Any


class RingBuffer:
    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError(f"RingBuffer capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: deque = deque(maxlen=capacity)
        self._next = 0  # sequence number the next appended item gets
        self._lock = threading.Lock()

    def append(self, item: Any) -> None:
        with self._lock:
            self._items.append(item)
            self._next += 1

    def snapshot(self) -> list:
        with self._lock:
            return list(self._items)

    def since(self, seq_no: int) -> tuple[list, int]:
        """Items numbered >= seq_no that are still held, and the number to ask for next time.
        A reader that fell behind by more than `capacity` gets the oldest items still held."""
        with self._lock:
            first = self._next - len(self._items)
            start = max(seq_no, first) - first
            if start >= len(self._items):
                return [], self._next
            # deque has no slicing; islice from the left costs O(start), so walk from the right
            # when the reader is near the head (the usual case for a 20-30 Hz timer).
            count = len(self._items) - start
            items = [self._items[-count + i] for i in range(count)] if count < start else \
                list(self._items)[start:]
            return items, self._next

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    @property
    def total(self) -> int:
        """Items ever appended (the next sequence number)."""
        with self._lock:
            return self._next
