"""Errors of the kernel package. hip_kernels stands alone (it never imports engine), so these are
its own; the engine catches KernelError where it wants a SwarmscopeError."""
from __future__ import annotations


class KernelError(RuntimeError):
    """A HIP/CUDA call failed; the message carries the runtime's name for the error."""


class BuildError(KernelError):
    """The compiler rejected the kernel sources or could not be run."""

    def __init__(self, command: list[str], problem: str) -> None:
        self.command, self.problem = command, problem
        super().__init__(f"{command[0]} failed: {problem}\ncommand: {' '.join(command)}")


class LayoutError(ValueError):
    """An op got tensors of the wrong shape, dtype, device or memory layout."""

    def __init__(self, op: str, problem: str) -> None:
        self.op, self.problem = op, problem
        super().__init__(f"hip_kernels.{op}: {problem}")
