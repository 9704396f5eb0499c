"""Which device and dtype the engine runs on. ROCm builds of torch expose their GPUs through
torch.cuda, so "rocm" and "cuda" both mean torch.cuda here."""
from __future__ import annotations

import itertools
import os
import platform
import time
from pathlib import Path

import torch

from engine.errors import SwarmscopeError
from engine.thread_tuner import affinity

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
           "fp64": torch.float64}


def resolve_device(name: str = "auto") -> torch.device:
    """A GPU comes back with its index ("cuda:0"), as the tensors on it report their device."""
    name = name.lower()
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    kind, _, index = name.partition(":")
    if kind in ("cuda", "rocm", "gpu"):
        if not torch.cuda.is_available():
            build = "ROCm" if torch.version.hip else "CUDA" if torch.version.cuda else "CPU-only"
            raise SwarmscopeError(f"device {name!r} requested but torch ({build} build) sees no GPU")
        index, count = index or "0", torch.cuda.device_count()
        if not index.isdigit() or int(index) >= count:
            raise SwarmscopeError(f"no GPU {name!r}: torch sees {count}, cuda:0 to cuda:{count - 1}")
        return torch.device(f"cuda:{index}")
    raise SwarmscopeError(f"unknown device {name!r}; use auto, cpu, cuda, rocm or cuda:N")


def set_cpu_threads(threads: int | None) -> None:
    """Run the CPU's forward passes on `threads` threads (None: torch's choice, one per core):
    those this thread runs, as torch keeps the count per thread. On a busy desktop fewer can be
    faster: a thread that waits for a taken core stalls the others at every op's barrier."""
    if threads is not None:
        torch.set_num_threads(threads)


def cpu_threads(device: torch.device) -> int | None:
    """The threads a CPU's forward pass runs on; None on a GPU, where they do not set its pace."""
    return torch.get_num_threads() if device.type == "cpu" else None


def others_cpu_seconds() -> tuple[float, float] | None:
    """(CPU seconds every other process has run on the cores this one may use, monotonic
    seconds) now: the rate between two readings is how many of them other programs keep busy.
    Linux (/proc/stat's per-core lines; a container or `taskset` that pins this process to some
    cores counts only those); None elsewhere."""
    try:
        with open("/proc/stat") as stat:  # the cpu lines come first; the rest is not read
            lines = [line.split() for line in itertools.takewhile(
                lambda line: line.startswith("cpu"), stat) if line[3].isdigit()]
    except OSError:  # no /proc/stat (macOS, Windows)
        return None
    ours = affinity()
    if ours is None:
        return None
    busy = 0
    for fields in lines:
        if len(fields) >= 9 and int(fields[0][3:]) in ours:
            user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
            busy += user + nice + system + irq + softirq + steal
    mine = sum(os.times()[:2])  # this process, every thread of it
    return busy / os.sysconf("SC_CLK_TCK") - mine, time.monotonic()


def hardware(device: str, threads: int | None) -> str:
    """A device as users read it: "cpu, 2 threads", "cuda:0"."""
    return device if threads is None else f"{device}, {threads} thread{'s' * (threads != 1)}"


def cpu_has_fast_bf16() -> bool:
    """Whether the CPU has bf16 dot instructions (AVX512-BF16 or AMX on x86). Without them CPU
    bf16 matmuls emulate and get slower with every extra row, which would hide the compute slack
    swarmscope measures. oneDNN's own check is not enough on x86: it passes any AVX-512 CPU, and
    on an Ice Lake Xeon without AVX512-BF16 it picked bf16 with T = 1 (t(4) = 2.1 t(1)) where
    fp32 has T = 11 and decodes 16 lanes 1.7x faster."""
    if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686"):
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on `device`: a GPU runs kernels after the call that launched
    them returns, so a timer read before this times the launches, not the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def dtype_name(dtype: torch.dtype) -> str:
    """The short name `resolve_dtype` takes back ("fp32", "bf16", ...), used in caches and traces."""
    return next(name for name, value in _DTYPES.items() if value == dtype)


def resolve_dtype(name: str, device: torch.device | str) -> torch.dtype:
    device = torch.device(device)
    name = name.lower()
    if name == "auto":
        return torch.bfloat16 if device.type != "cpu" or cpu_has_fast_bf16() else torch.float32
    if name not in _DTYPES:
        raise SwarmscopeError(f"unknown dtype {name!r}; use {', '.join(_DTYPES)} or auto")
    if name == "fp16" and device.type == "cpu":
        # CPU fp16 matmuls fall back to slow paths and overflow where bf16 does not.
        raise SwarmscopeError("fp16 is for GPUs; on CPU use bf16 or fp32")
    return _DTYPES[name]


def free_memory_bytes(device: torch.device) -> int | None:
    """Memory a model could still take on `device`: the GPU's free memory, or on Linux the
    kernel's MemAvailable (page cache it would give back included); None where unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
