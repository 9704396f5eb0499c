import os
import platform
from pathlib import Path

import pytest
import torch

from engine import devices
from engine.errors import SwarmscopeError

CPUINFO = Path("/proc/cpuinfo")


@pytest.mark.skipif(not CPUINFO.exists() or platform.machine() != "x86_64",
                    reason="reads the x86 CPU flags from /proc/cpuinfo")
def test_fast_bf16_means_bf16_dot_instructions_not_just_avx512():
    flags = set(next(line for line in CPUINFO.read_text().splitlines()
                     if line.startswith("flags")).split(":", 1)[1].split())
    assert devices.cpu_has_fast_bf16() == bool(flags & {"avx512_bf16", "amx_bf16"})


@pytest.mark.parametrize("fast, expected", [(True, torch.bfloat16), (False, torch.float32)])
def test_auto_dtype_on_cpu_is_bf16_only_with_bf16_dot_instructions(monkeypatch, fast, expected):
    monkeypatch.setattr(devices, "cpu_has_fast_bf16", lambda: fast)
    assert devices.resolve_dtype("auto", "cpu") == expected
    assert devices.resolve_dtype("FP32", "cpu") == torch.float32  # an explicit choice is kept


@pytest.mark.parametrize("name, message", [("int8", "unknown dtype 'int8'"),
                                           ("fp16", "fp16 is for GPUs")])
def test_bad_dtypes_are_clear_errors(name, message):
    with pytest.raises(SwarmscopeError, match=message):
        devices.resolve_dtype(name, "cpu")


@pytest.mark.skipif(not os.path.exists("/proc/meminfo"), reason="reads Linux's /proc/meminfo")
def test_free_cpu_memory_is_the_kernels_available_memory():
    available_kb = next(int(line.split()[1]) for line in open("/proc/meminfo")
                        if line.startswith("MemAvailable:"))
    free = devices.free_memory_bytes(torch.device("cpu"))
    assert abs(free - available_kb * 1024) < 2**30  # read a moment apart


@pytest.mark.parametrize("name, expected", [("auto", "cuda:0"), ("cuda", "cuda:0"), ("rocm", "cuda:0"),
                                            ("cuda:1", "cuda:1"), ("GPU:1", "cuda:1")])
def test_a_gpu_comes_back_with_its_index(monkeypatch, name, expected):
    """As a tensor on it reports its device: a KV cache and a model compare theirs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert devices.resolve_device(name) == torch.device(expected)


@pytest.mark.parametrize("name", ["cuda:2", "cuda:x", "rocm:-1"])
def test_a_gpu_that_is_not_there_is_a_clear_error(monkeypatch, name):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(SwarmscopeError, match=rf"no GPU '{name}': torch sees 2, cuda:0 to cuda:1"):
        devices.resolve_device(name)


def test_a_device_reads_with_its_cpu_threads():
    assert devices.hardware("cpu", 1) == "cpu, 1 thread"
    assert devices.hardware("cpu", 8) == "cpu, 8 threads"
    assert devices.hardware("cuda:0", None) == "cuda:0"
    assert devices.cpu_threads(torch.device("cpu")) == torch.get_num_threads()
    assert devices.cpu_threads(torch.device("cuda:0")) is None  # no GPU needed to ask


def test_cpu_threads_are_set_or_left_as_torch_chose(restore_threads):
    chosen = torch.get_num_threads()
    devices.set_cpu_threads(None)
    assert torch.get_num_threads() == chosen
    devices.set_cpu_threads(1)
    assert torch.get_num_threads() == 1


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads Linux's /proc/stat")
def test_other_programs_cpu_counts_a_spinning_process():
    """A child spinning for half a second shows as at least a third of a core (more where the
    machine is busier: the count is of every other process)."""
    import subprocess
    import sys

    child = "import time\nend = time.monotonic() + 0.5\nwhile time.monotonic() < end: pass"
    before = devices.others_cpu_seconds()
    subprocess.run([sys.executable, "-c", child], check=True)
    after = devices.others_cpu_seconds()
    assert (after[0] - before[0]) / (after[1] - before[1]) > 0.33


def test_other_programs_cpu_is_the_busy_time_of_this_processs_cores_less_its_own(monkeypatch):
    """/proc/stat's busy ticks (user, nice, system, irq, softirq, steal; not idle, iowait) of the
    cores this process may run on, less its own CPU seconds; unknown without /proc/stat."""
    import io
    ticks = os.sysconf("SC_CLK_TCK")
    line = lambda core, busy: f"cpu{core} {busy * ticks} 0 0 {50 * ticks} {9 * ticks} 0 0 0 0 0\n"
    stat = (f"cpu  {100 * ticks} 0 0 0 0 0 0 0 0 0\n" + line(0, 7) + line(1, 3) + line(2, 5)
            + "intr 1 2 3\n")
    monkeypatch.setattr("builtins.open", lambda *args, **kwargs: io.StringIO(stat))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {1, 2})  # pinned: not core 0
    monkeypatch.setattr(os, "times", lambda: os.times_result((1.5, 0.5, 7.0, 7.0, 0.0)))
    others, _ = devices.others_cpu_seconds()
    assert others == pytest.approx(3 + 5 - 2.0)  # a child of this process counts as another

    def no_proc(*args, **kwargs):
        raise FileNotFoundError("/proc/stat")

    monkeypatch.setattr("builtins.open", no_proc)
    assert devices.others_cpu_seconds() is None
