"""GPU kernels for the ragged paged verify pass, each with a torch reference that is its spec.

    from hip_kernels import paged_attention, write_kv, verify_greedy, verify_rejection
    hip_kernels.available()        # True when the ops run the HIP/CUDA kernels
    hip_kernels.why_unavailable()  # why the torch references run instead

Kernels build on first use (hipcc for the ROCm device's own arch, nvcc on CUDA) and are cached.
This package never imports engine or app.
"""
from hip_kernels.errors import BuildError, KernelError, LayoutError
from hip_kernels.library import available, check, why_unavailable
from hip_kernels.ops import paged_attention, verify_greedy, verify_rejection, write_kv

__all__ = ["BuildError", "KernelError", "LayoutError", "available", "check", "paged_attention",
           "verify_greedy", "verify_rejection", "why_unavailable", "write_kv"]
