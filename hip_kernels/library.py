"""The built kernel library: built on first use for the current GPU, loaded with ctypes, and the
one `check()` that turns a HIP/CUDA error code into a KernelError carrying the runtime's name.

Tensors cross as raw device pointers and torch's current stream, so kernels queue behind torch's
own work without a sync. The library links the same HIP/CUDA runtime as torch (the loader reuses
an already-loaded library of the same soname), so streams and pointers mean the same thing.
"""
from __future__ import annotations

import ctypes
import os
import threading

from hip_kernels.errors import KernelError

# dtype codes of portability.h's ss_dtype.
DTYPE_CODES = {"torch.float32": 0, "torch.float16": 1, "torch.bfloat16": 2}

_P, _I, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
_SIGNATURES = {
    "ss_error_name": ([_I], ctypes.c_char_p),
    "ss_warp_size": ([], _I),
    "ss_paged_attention": ([_I, _P, _P, _P, _P, _P, _P, _P, _P, _P] + [_I] * 9 + [_F, _P], _I),
    "ss_write_kv": ([_I, _P, _P, _P, _P, _P, _I, _I, _P], _I),
    "ss_verify_greedy": ([_P, _P, _P, _P, _P, _I, _P], _I),
    "ss_verify_rejection": ([_P] * 8 + [_I, _I, _P], _I),
}

_lock = threading.Lock()
_state: dict[str, object] = {}  # "lib": ctypes.CDLL, or "why": str once a load was tried


def _load() -> None:
    import torch

    if os.environ.get("SWARMSCOPE_KERNELS", "1") == "0":
        _state["why"] = "disabled by SWARMSCOPE_KERNELS=0"
        return
    if not torch.cuda.is_available():
        _state["why"] = "no GPU: torch sees no ROCm or CUDA device, so the torch references run"
        return
    from hip_kernels.build import build, toolchain_for_current_device

    try:
        lib = ctypes.CDLL(str(build(toolchain_for_current_device())))
    except (KernelError, OSError) as exc:
        _state["why"] = f"kernels not built, torch references run instead: {exc}"
        return
    for name, (argtypes, restype) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype
    _state["lib"] = lib


def library() -> ctypes.CDLL | None:
    """The loaded library, building it on first call; None where kernels cannot run."""
    with _lock:
        if not _state:
            _load()
    return _state.get("lib")  # type: ignore[return-value]


def available() -> bool:
    """True when the ops run the kernels (on the current GPU), False when they run the references."""
    return library() is not None


def why_unavailable() -> str:
    """Why the references run instead of the kernels; empty when the kernels are available."""
    return "" if available() else str(_state["why"])


def check(code: int) -> None:
    """Raises KernelError named by the runtime for any non-zero HIP/CUDA error code."""
    if code == 0:
        return
    lib = _state.get("lib")
    name = lib.ss_error_name(code).decode() if lib is not None else "unknown"
    raise KernelError(f"HIP/CUDA error {code} ({name})")


def stream_of(device) -> int:
    """Torch's current stream on `device` as the raw handle the launchers take."""
    import torch

    return torch.cuda.current_stream(device).cuda_stream
