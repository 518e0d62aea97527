"""InfiniOps' fused LLM kernels as PyTorch operators: ``torch.ops.infini.*``.

Each operator runs on ``infini`` tensors through the kernel seam (InfiniOps'
own kernel on the Infini stack, the CPU reference on ``host``), on CPU
tensors as the CPU reference, and on meta/fake tensors for shapes (so
``torch.compile`` traces it); autograd differentiates it on every device. A
dtype the backend does not declare (``torch_infini.supported_dtypes``) runs
in the CPU fallback, under its policy. Computed in float (float64 for
float64 inputs) and rounded once to the input's dtype. See
docs/fused_operators.md.
"""

from __future__ import annotations

import torch

__all__ = ["causal_softmax", "silu_and_mul", "swiglu"]


def silu_and_mul(input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (PyTorch's name)
    """``silu(input[..., :h]) * input[..., h:]`` for ``input`` of shape ``[..., 2h]``.

    The gated MLP activation with the gate and up projections concatenated
    (vLLM's layout): one ``[..., 2h]`` projection, one ``[..., h]`` result.
    """
    return torch.ops.infini.silu_and_mul(input)


def swiglu(input: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:  # noqa: A002
    """``input * silu(gate)``: Llama's MLP activation, ``up(x) * silu(gate(x))``.

    ``input`` and ``gate`` have one shape and one dtype.
    """
    return torch.ops.infini.swiglu(input, gate)


def causal_softmax(input: torch.Tensor) -> torch.Tensor:  # noqa: A002
    """Softmax over the last dimension under a causal mask.

    ``input`` is ``[..., s, t]`` attention scores of ``s`` new queries
    against ``t >= s`` keys (the first ``t - s`` from a KV cache): row ``i``
    is normalized over columns ``j <= t - s + i``, and the others are 0.
    The infini kernel takes 2-D and 3-D inputs (more dimensions run in the
    CPU fallback).
    """
    return torch.ops.infini.causal_softmax(input)
