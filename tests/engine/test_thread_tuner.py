"""Automatic CPU threads: the tuner meets steps whose times a simulated machine sets, per count
and per moment (another program taking a core and letting it go)."""
import math
import random

import pytest

from engine.thread_tuner import ThreadTuner, default_counts

STEP_MS = 50.0  # the reference curve's time for every shape here


class Machine:
    """Steps take session time and as much wall time; `busy(t)`: the cores other programs hold
    at t, which slow the threads down (`slowdown`) and which `others` reports when `tells`."""

    def __init__(self, slowdown, busy=lambda t: 0.0, tells=True, noise=0.0, seed=0):
        self.slowdown, self.busy, self.tells, self.noise = slowdown, busy, tells, noise
        self.rng = random.Random(seed)
        self.t, self.wall, self.others_s = 0.0, 0.0, 0.0

    def others(self):
        return (self.others_s, self.wall) if self.tells else None


def run(tuner, machine, seconds):
    """Steps until session time `seconds`, switching as the tuner says; the count that ran each
    step."""
    ran = []
    while machine.t < seconds:
        start, count = machine.t, tuner.current_count
        dt_ms = STEP_MS * machine.slowdown(count, start, machine.busy(start)) * \
            (1 + machine.noise * machine.rng.uniform(-1, 1))
        machine.t += dt_ms / 1000
        machine.wall += dt_ms / 1000
        machine.others_s += machine.busy(start) * dt_ms / 1000
        ran.append(count)
        tuner.current_count = tuner.observe(start, dt_ms, batch=4, drafts=2, prefill=0)
    return ran


def make(counts, machine, current=None):
    tuner = ThreadTuner(counts, current or max(counts), lambda batch, drafts, prefill: STEP_MS,
                        others=machine.others)
    tuner.current_count = tuner.current  # what runs: the count last switched to
    return tuner


IDLE = {2: 1.0, 1: 1.33}   # bench threads, both cores free: one thread 0.75x the speed
BUSY = {2: 3.3, 1: 1.2}    # one core taken: two threads a third of one's speed


def two_cores(count, t, busy):
    return (BUSY if busy else IDLE)[count]


def test_with_the_cores_free_the_count_stays_and_probes_grow_rare():
    machine = Machine(two_cores, noise=0.1)
    tuner = make([1, 2], machine)
    ran = run(tuner, machine, 300)
    assert tuner.current == 2
    assert ran.count(1) / len(ran) < 0.02  # a lost probe costs 8 steps, ever more seldom
    assert tuner.probes <= 6  # at 1, 11, 31, 71, 151 s: the wait doubles to 160 s


@pytest.mark.parametrize("tells", [True, False])
def test_a_core_taken_brings_fewer_threads_at_once_and_its_return_brings_them_back(tells):
    """Taken, the system says so (where it tells) and the steps slow down; let go, only the
    system says so (one thread runs as fast either way), and without it the next probe finds
    out."""
    taken = (60.0, 200.0)
    machine = Machine(two_cores, busy=lambda t: float(taken[0] <= t < taken[1]), tells=tells)
    tuner = make([1, 2], machine)
    run(tuner, machine, 60.0)
    assert tuner.current == 2
    run(tuner, machine, 62.0 if tells else 65.0)
    assert tuner.current == 1  # within seconds of the core being taken, not at a period
    ran = run(tuner, machine, 200.0)
    assert ran.count(1) / len(ran) > 0.98  # probes of two threads lose early while it is taken
    run(tuner, machine, 201.5 if tells else 200.0 + ThreadTuner.LONGEST_PERIOD_S + 5)
    assert tuner.current == 2


def test_where_fewer_threads_run_faster_on_an_idle_machine_the_load_rule_lets_them():
    """Probes find a memory-bound machine's best count below the cores; the load rule acts on
    changes of the load only, so it does not pull the count back up while the load stays."""
    counts = default_counts(8)
    machine = Machine(lambda count, t, busy: {1: 1.6, 2: 1.2, 4: 1.0, 8: 1.15}[count])
    tuner = make(counts, machine)
    run(tuner, machine, 120)
    assert tuner.current == 4


def test_noise_alike_for_every_count_does_not_thrash():
    """Counts as fast as each other, steps 30 % apart: probes stay rare, and so do switches."""
    machine = Machine(lambda count, t, busy: 1.0, noise=0.3, seed=4)
    tuner = make([1, 2], machine)
    in_force = []
    for end in range(10, 610, 10):
        run(tuner, machine, end)
        in_force.append(tuner.current)
    assert tuner.probes <= 12
    assert sum(a != b for a, b in zip(in_force, in_force[1:])) <= 4


def test_probes_compare_neighbouring_steps_so_a_swing_of_the_whole_step_does_not_mislead():
    """The batch's make-up moves every count's steps by up to 40 % within a second or two; the
    pairs see one thread 1.33x slower through it, and two threads are kept every time."""
    swing = lambda t: 1 + 0.4 * math.sin(2 * math.pi * t / 1.7)
    machine = Machine(lambda count, t, busy: IDLE[count] * swing(t))
    tuner = make([1, 2], machine)
    in_force = []
    for end in range(1, 400):
        run(tuner, machine, end)
        in_force.append(tuner.current)
    assert tuner.probes >= 5 and set(in_force) == {2}


def test_a_busy_start_is_found_by_the_first_probe():
    machine = Machine(two_cores, busy=lambda t: 1.0)
    tuner = make([1, 2], machine)
    run(tuner, machine, 6.0)
    assert tuner.current == 1


@pytest.mark.parametrize("best", [4, 16])
def test_among_many_counts_it_walks_to_the_fastest(best):
    """Halvings of 16 cores; the machine runs `best` threads fastest, and each step away from
    it costs 20 %."""
    counts = default_counts(16)
    assert counts == [1, 2, 4, 8, 16]
    distance = lambda count, t, busy: 1.0 + 0.2 * abs(counts.index(count) - counts.index(best))
    machine = Machine(distance)
    tuner = make(counts, machine)
    run(tuner, machine, 400)
    assert tuner.current == best


def test_a_lone_count_has_nothing_to_try():
    machine = Machine(lambda count, t, busy: 5.0 if t > 5 else 1.0)
    tuner = make([1], machine)
    assert set(run(tuner, machine, 60)) == {1}


def test_a_gap_between_blocks_says_nothing_of_what_others_ran():
    """A benchmark's other engines ran while this one waited: the wall clock moved on, the
    session's did not, and the cores others took meanwhile are not held against it."""
    machine = Machine(lambda count, t, busy: 1.0)
    tuner = make([1, 2], machine)
    run(tuner, machine, 5.0)  # its first probe (at 3 s) lost: the next comes at 13 s
    ran = []
    for _ in range(100):  # each step followed by 10 s of others' work on the wall clock
        ran += run(tuner, machine, machine.t + 0.001)
        machine.others_s += 10.0
        machine.wall += 10.0
    assert machine.t < 13.0 and set(ran) == {2}  # no probe: the gaps' work was not a sign


def test_counts_are_the_physical_cores_this_process_may_run_on(tmp_path, monkeypatch):
    """Four hardware threads on two cores (0 and 2 share one): two cores, or one where pinned
    to a core's pair; without the topology, the hardware threads."""
    import os

    from engine.thread_tuner import physical_cores, usable_cores
    for cpu, siblings in enumerate(["0,2", "1,3", "0,2", "1,3"]):
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(siblings + "\n")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert (usable_cores(), physical_cores(str(tmp_path))) == (4, 2)
    assert default_counts(physical_cores(str(tmp_path))) == [1, 2]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2})
    assert (usable_cores(), physical_cores(str(tmp_path))) == (2, 1)
    assert physical_cores(str(tmp_path / "elsewhere")) == 2
