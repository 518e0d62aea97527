"""Every change torch_infini makes to PyTorch's own code, in one place.

Each function replaces or wraps something of PyTorch's where PyTorch offers
no hook for an out-of-tree device; its docstring says why. ``PATCHES`` lists
them all, each with the PyTorch releases it was checked on and the
extension point whose absence it fills; tests/python/package/test_patches.py fails
when one stops applying, when one is made unlisted, and on a PyTorch
release not checked yet.

- :func:`apply` makes the changes to eager PyTorch, torch.distributed and
  torch.compile's entry; torch_infini/__init__.py calls it once, at import.
- :func:`apply_to_inductor` makes the changes to Inductor; _inductor.py calls
  it as it loads, the first time Inductor compiles for infini (importing
  Inductor at ``import torch_infini`` would cost seconds).

Not here, because they are PyTorch's extension APIs rather than changes to
its code:

- ``torch.utils.rename_privateuse1_backend``, ``torch._register_device_module``,
  ``torch.utils.generate_methods_for_privateuse1_backend``, and the
  ``torch.infini.<submodule>`` entries of ``sys.modules`` next to the one
  ``_register_device_module`` makes: torch_infini/__init__.py;
- the c10d backend ``"infini"`` (``torch.distributed.Backend.register_backend``):
  distributed.py;
- ``torch.compiler.config.cache_key_tag``, a public setting: _compile_cache.py;
- Inductor's and Dynamo's out-of-tree device hooks
  (``register_device_op_overrides``, ``register_interface_for_device``):
  _inductor.py; the device module's ``Scheduling`` and wrapper codegen
  attributes, which Inductor passes to its ``register_backend_for_device``:
  infini/__init__.py;
- the operators and kernels the native library registers with the
  dispatcher (``_C``).
"""

from __future__ import annotations

import functools
import inspect
import pkgutil
import sys
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Patch:
    """One change to PyTorch's code, listed here with what would remove it."""

    target: str  # what of PyTorch's is replaced ("torch._tensor_str._tensor_str")
    by: str  # the function here that makes the change
    checked: tuple[str, ...]  # the PyTorch releases (major.minor) the suite passed on with it
    upstream: str  # the extension point PyTorch lacks; with it the patch goes


# Every patch, in the order they are made. tests/python/package/test_patches.py
# fails when one stops applying (its target moved, renamed or no longer
# ours) and when a patch is made that is not listed here.
PATCHES: tuple[Patch, ...] = (
    Patch(
        "torch._tensor_str._tensor_str",
        "_print_infini_tensors_on_the_cpu",
        ("2.13",),
        "a per-device choice in torch._tensor_str to format on the CPU (today a fixed "
        "list: xla, lazy, ipu, mtia). Formatting through the CPU fallback instead "
        "would stage ~10 operators per print, each warning under the default policy",
    ),
    Patch(
        "torch.distributed.distributed_c10d.init_process_group",
        "_default_process_group_backend_on_infini",
        ("2.13",),
        "a default backend per device type for init_process_group() without a backend: "
        "Backend.register_backend(devices=['infini']) makes infini the accelerator's "
        "backend, but BackendConfig('undefined') then creates no CPU backend, which "
        "DDP's CPU collectives need (distributed_c10d.BackendConfig, 2.13)",
    ),
    Patch(
        "torch._TorchCompileInductorWrapper.__call__",
        "_compile_fallback_for_inductor",
        ("2.13",),
        "a hook between torch.compile and its default backend (the cache directories "
        "checked before Inductor reads them; aot_eager where Inductor cannot serve infini)",
    ),
    Patch(
        "torch.autograd._engine_run_backward",
        "_backward_on_the_calling_thread",
        ("2.13",),
        "a per-device choice of the autograd engine's device threads (c10's "
        "DeviceGuardImpl could say a device's kernels run on the calling thread)",
    ),
    Patch(
        "torch._inductor.utils.get_current_backend",
        "apply_to_inductor",
        ("2.13",),
        "the code generation backend of an out-of-tree device, asked of the device "
        "(register_backend_for_device records a scheduling, not the backend's name)",
    ),
    Patch(
        "torch._inductor.scheduler.BaseSchedulerNode.is_cpu",
        "apply_to_inductor",
        ("2.13",),
        "whether a device's kernels are C++ loops, asked of the device "
        "(the scheduler tests device.type == 'cpu')",
    ),
    Patch(
        "torch._inductor.ir.is_cpu",
        "apply_to_inductor",
        ("2.13",),
        "the same question for the IR's reuse thresholds (ir.is_cpu tests the name)",
    ),
    Patch(
        "torch._inductor.lowering.use_two_step_variance",
        "_two_step_variance_as_on_the_cpu",
        ("2.13",),
        "a per-device variance algorithm threshold (config.cpp's applies to 'cpu' only)",
    ),
)

# The attribute each replacement carries: the Patch.target it replaces.
MARK = "_torch_infini_patch"


def _mark(function: Any, target: str) -> Any:
    setattr(function, MARK, target)
    return function


def resolve(target: str) -> Any:
    """What ``target`` names now (its module imported), or None."""
    try:
        return pkgutil.resolve_name(target)
    except (ImportError, AttributeError, ValueError):
        return None


def applied(patch: Patch) -> bool:
    """Whether ``patch``'s target is this module's replacement now."""
    return getattr(resolve(patch.target), MARK, None) == patch.target


def apply() -> None:
    """The changes to eager PyTorch, torch.distributed and torch.compile's entry."""
    _print_infini_tensors_on_the_cpu()
    _default_process_group_backend_on_infini()
    _compile_fallback_for_inductor()
    _backward_on_the_calling_thread()


def _backward_on_the_calling_thread() -> None:
    """Where device memory is host memory (``host``, InfiniRT ``cpu``), a
    backward pass from infini tensors runs on the thread that called it, as
    a CPU graph's does.

    PyTorch's autograd engine gives the nodes of every device but the CPU
    (and meta, lazy) to a worker thread per device and makes the caller
    wait: a CUDA stream is fed from there while the caller's thread sleeps.
    Where the device's kernels run on the calling CPU, that handoff buys
    nothing and costs two thread wake-ups per backward (a one-element
    backward on host: 64 us against the CPU's 17, 47 of them the wake-ups on
    a 2-core machine). The engine's one switch for it is
    ``torch.autograd.set_multithreading_enabled`` (thread-local): it is
    turned off around the engine's run (``torch.autograd._engine_run_backward``,
    which ``backward`` and ``torch.autograd.grad`` call) when a root is an
    infini tensor, and restored after; a caller who turned it off keeps it
    off. Streams, devices and reentrant backwards then work as PyTorch runs
    them with the switch off. Accelerators keep the engine's device threads,
    as CUDA does. C++ callers of ``torch::autograd::backward`` are not
    reached here; they can turn the switch off themselves
    (``c10::AutogradState``).
    """
    import torch.autograd as autograd

    run_backward = autograd._engine_run_backward

    @functools.cache  # fixed once the runtime exists (it does, with infini roots)
    def host_addressable() -> bool:
        from . import _backend

        return _backend.host_addressable()

    def runs_on_the_caller(roots: Any) -> bool:
        infini = any(isinstance(t, torch.Tensor) and t.device.type == "infini" for t in roots)
        return infini and host_addressable()

    @functools.wraps(run_backward)
    def _engine_run_backward(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
        if not torch._C._is_multithreading_enabled() or not runs_on_the_caller(t_outputs):
            return run_backward(t_outputs, *args, **kwargs)
        torch._C._set_multithreading_enabled(False)
        try:
            return run_backward(t_outputs, *args, **kwargs)
        finally:
            torch._C._set_multithreading_enabled(True)

    autograd._engine_run_backward = _mark(
        _engine_run_backward, "torch.autograd._engine_run_backward"
    )


def _print_infini_tensors_on_the_cpu() -> None:
    """``print(x)`` of an infini tensor formats a CPU copy.

    PyTorch formats a tensor with tensor operations (abs, isfinite, max, ...)
    on the tensor's own device, and moves only some backends (xla, lazy, ipu,
    mtia) to the CPU first, by name. Most of those operations have no infini
    kernel, so ``torch._tensor_str._tensor_str`` is wrapped to copy infini
    tensors to the CPU first, as for those backends. Display only: no
    operator result ever comes from the CPU.
    """
    import torch._tensor_str as tensor_str

    original = tensor_str._tensor_str
    if getattr(original, MARK, None):
        return

    @functools.wraps(original)
    def _tensor_str(self: torch.Tensor, indent: int, *args: Any, **kwargs: Any) -> str:
        if self.device.type == "infini":
            self = self.cpu()
        return original(self, indent, *args, **kwargs)

    tensor_str._tensor_str = _mark(_tensor_str, "torch._tensor_str._tensor_str")


def _default_process_group_backend_on_infini() -> None:
    """``init_process_group()`` without a backend and a device_id uses
    ``distributed.DEFAULT_BACKEND`` where the accelerator is infini.

    c10d alone would name the group's backend "undefined", create only the
    accelerator's backend and make gloo (never created) the group's default:
    CPU collectives then find no backend, and DDP fails with "Could not find
    backend type 1 for Process Group with name gloo". c10d takes no default
    backend per device, so ``init_process_group`` is wrapped in every module
    of torch.distributed that holds it by name (torch.distributed,
    device_mesh's init_device_mesh, ...); modules imported later take it from
    distributed_c10d.
    """
    if not dist.is_available():
        return
    from .distributed import DEFAULT_BACKEND

    c10d = dist.distributed_c10d
    original = c10d.init_process_group
    if getattr(original, MARK, None):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> None:
        bound = signature.bind(*args, **kwargs)
        if (
            bound.arguments.get("backend") is None
            and bound.arguments.get("device_id") is None
            and torch._C._get_accelerator().type == "infini"
        ):
            bound.arguments["backend"] = DEFAULT_BACKEND
        return original(*bound.args, **bound.kwargs)

    _mark(init_process_group, "torch.distributed.distributed_c10d.init_process_group")
    for name, module in list(sys.modules.items()):
        if (name == "torch.distributed" or name.startswith("torch.distributed.")) and getattr(
            module, "init_process_group", None
        ) is original:
            module.init_process_group = init_process_group  # type: ignore[attr-defined]


def _compile_fallback_for_inductor() -> None:
    """torch.compile's default backend checks its cache directories before
    each graph (_compile_cache.py), and compiles graphs with infini tensors
    with ``aot_eager`` where Inductor cannot serve infini (_compile_fallback.py).

    PyTorch has no hook between ``torch.compile`` and its default backend, so
    the ``__call__`` of the object it builds for ``backend="inductor"``
    (``torch._TorchCompileInductorWrapper``) is wrapped; that loads nothing of
    Dynamo or Inductor. The decision and the warning are _compile_fallback's,
    looked up there at each call (it is imported then, not at import).
    """
    wrapper = torch._TorchCompileInductorWrapper
    original = wrapper.__call__
    if getattr(original, MARK, None):
        return

    def __call__(self: Any, model_: Any, inputs_: Any, **kwargs: Any) -> Any:
        from . import _compile_cache, _compile_fallback

        # Before Inductor reads its caches, for every graph: whoever else can
        # write there could run code here (_compile_cache.py).
        _compile_cache.secure_directories()
        if _compile_fallback.holds_infini_tensors(model_, inputs_):
            if not _compile_fallback.inductor_serves_infini():
                return _compile_fallback.compile_with_aot_eager(model_, inputs_)
            # Registered before AOTAutograd picks its decompositions (the
            # fused operators', graph_passes/decompositions.py); Inductor
            # itself would ask for the device's backend only later.
            from . import _inductor  # noqa: F401
        return original(self, model_, inputs_, **kwargs)

    wrapper.__call__ = _mark(__call__, "torch._TorchCompileInductorWrapper.__call__")  # type: ignore[method-assign]


def apply_to_inductor() -> None:
    """Four decisions Inductor makes by the device name "cpu", with no hook
    for another device, extended to infini (whose kernels are Inductor's C++
    CPU kernels, _inductor.py); test_compile.py pins them by name.

    - ``get_current_backend`` answers "cpp" for infini where the compiler
      plug-in compiles C++ (otherwise an unknown device gets the Triton
      backend's code paths), "triton" where it compiles Triton. It is
      replaced in every module that imported it by name.
    - ``BaseSchedulerNode.is_cpu`` is true for infini nodes of a C++
      plug-in: otherwise GPU-only scheduler rewrites run on C++ kernels.
    - ``ir.is_cpu`` (when to store an intermediate instead of recomputing it
      in each reader: the operation-count and read thresholds, heavy
      operations such as exp reused) is true for infini nodes of a C++
      plug-in: with the GPU thresholds a C++ kernel recomputes, say, a
      softmax's exp(x - max) in every loop that reads it (1.4x the CPU's
      time on a [4096, 256] softmax).
    - ``lowering.use_two_step_variance`` (a variance as mean then sum of
      squares, or Welford's) answers for infini as for the CPU: a compiled
      layer norm then runs the CPU's kernel, bit for bit.
    """
    from torch._inductor import ir as _ir
    from torch._inductor import scheduler as _scheduler
    from torch._inductor import utils as _utils
    from torch._inductor.codegen import common as _common
    from torch._inductor.virtualized import V

    original_backend = _utils.get_current_backend

    from . import _compiler

    def get_current_backend(device_type: str | None = None) -> str:
        if not device_type:
            device_type = V.graph.get_current_device_or_throw().type
        if device_type == "infini":
            return "triton" if _compiler.source_language() == "triton" else "cpp"
        return original_backend(device_type)

    _mark(get_current_backend, "torch._inductor.utils.get_current_backend")
    for module in (_utils, _common, _scheduler):
        if getattr(module, "get_current_backend", None) is original_backend:
            module.get_current_backend = get_current_backend  # type: ignore[attr-defined]
    try:
        from torch._inductor.kernel import mm_common

        if getattr(mm_common, "get_current_backend", None) is original_backend:
            mm_common.get_current_backend = get_current_backend  # type: ignore[attr-defined]
    except ImportError:
        pass

    def is_cpu(self: Any) -> bool:
        device = self.get_device()
        if device is None:
            return False
        return device.type == "cpu" or (
            device.type == "infini" and _compiler.source_language() == "c++"
        )

    _scheduler.BaseSchedulerNode.is_cpu = _mark(  # type: ignore[method-assign]
        is_cpu, "torch._inductor.scheduler.BaseSchedulerNode.is_cpu"
    )

    original_ir_is_cpu = _ir.is_cpu

    def ir_is_cpu(x: Any) -> bool:
        if original_ir_is_cpu(x):
            return True
        return _ir.get_device_type(x) == "infini" and _compiler.source_language() == "c++"

    _ir.is_cpu = _mark(ir_is_cpu, "torch._inductor.ir.is_cpu")
    _two_step_variance_as_on_the_cpu(_compiler.source_language)


def _two_step_variance_as_on_the_cpu(source_language: Any) -> None:
    """PyTorch 2.13's choice between the two variance algorithms reads the
    CPU's threshold for device "cpu" only (2.11 has no per-device choice:
    nothing to extend there)."""
    import sympy
    from torch._inductor import config
    from torch._inductor import lowering as _lowering
    from torch._inductor.utils import sympy_product

    original = getattr(_lowering, "use_two_step_variance", None)
    if original is None or not hasattr(config.cpp, "use_two_step_variance_threshold"):
        return

    def use_two_step_variance(x: Any, axis: Any, keepdim: Any, *args: Any, **kwargs: Any) -> bool:
        device = x.get_device()
        if device is None or device.type != "infini" or source_language() != "c++":
            return original(x, axis, keepdim, *args, **kwargs)
        # The CPU's branch: two steps up to the threshold, unless the
        # reduction is the whole tensor.
        reduction = _lowering._make_reduction_inner(
            x,
            axis=_lowering._validate_reduction_axis(x, axis),
            keepdims=keepdim,
            dtype=None,
            override_return_dtype=None,
        )
        numel = sympy_product(reduction["reduction_ranges"])
        if not isinstance(numel, sympy.Integer):
            return False
        return (
            int(numel) <= config.cpp.use_two_step_variance_threshold
            and sympy_product(reduction["ranges"]) != 1
        )

    _lowering.use_two_step_variance = _mark(
        use_two_step_variance, "torch._inductor.lowering.use_two_step_variance"
    )
