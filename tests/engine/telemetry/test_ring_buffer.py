import threading

import pytest

from engine.telemetry.ring_buffer import RingBuffer


def test_since_returns_only_new_items_and_the_next_number():
    ring = RingBuffer(capacity=5)
    for i in range(3):
        ring.append(i)
    items, nxt = ring.since(0)
    assert items == [0, 1, 2] and nxt == 3
    ring.append(3)
    assert ring.since(nxt) == ([3], 4)
    assert ring.since(4) == ([], 4)


def test_bounded_and_a_reader_that_fell_behind_gets_the_oldest_held():
    ring = RingBuffer(capacity=4)
    for i in range(10):
        ring.append(i)
    assert len(ring) == 4 and ring.snapshot() == [6, 7, 8, 9] and ring.total == 10
    assert ring.since(2) == ([6, 7, 8, 9], 10)
    assert ring.since(8) == ([8, 9], 10)
    with pytest.raises(ValueError):
        RingBuffer(0)


def test_concurrent_appends_and_reads_lose_nothing():
    ring = RingBuffer(capacity=100_000)
    seen, stop = [], threading.Event()

    def reader():
        nxt = 0
        while not stop.is_set() or nxt < ring.total:
            items, nxt = ring.since(nxt)
            seen.extend(items)

    thread = threading.Thread(target=reader)
    thread.start()
    for i in range(20_000):
        ring.append(i)
    stop.set()
    thread.join()
    assert seen == list(range(20_000))
