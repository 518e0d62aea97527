"""torch_infini: the `infini` PyTorch device on the Infini stack.

Importing the package registers the PrivateUse1 backend as ``infini`` and
installs ``torch.infini``, which follows ``torch.cuda``'s names and semantics.
"""

from __future__ import annotations

# 1. Version guard, before anything is renamed, loaded or registered.
from . import _version_guard

_version_guard.check_installed()

import torch  # noqa: E402

from . import _backend, _compile_cache  # noqa: E402

# 2. Load the native library (its registrations; the device-type table the
# selection is checked against), check the settings, hand over the
# selection, rename PrivateUse1.
try:
    from . import _C  # noqa: E402, F401  (loads libtorch_infini: its registrations)
except ImportError as _error:
    if "libinfini" in str(_error) or "libcu" in str(_error):
        raise ImportError(
            f"torch_infini was built against InfiniRT/InfiniOps, which the loader cannot find "
            f"with the libraries they need ({_error}). Make libinfiniops.so and libinfinirt.so "
            f"(and, for a vendor build, its libraries: CUDA runtime, cuBLAS, ...) visible: add "
            f"their lib (or lib64) directories to LD_LIBRARY_PATH, or register them with ldconfig."
        ) from _error
    raise

# Every setting is checked, and an explicitly named backend initialized,
# before anything is renamed or registered: a bad value or a backend that
# cannot be served raises ImportError here and leaves PyTorch as it was.
from . import _settings  # noqa: E402

_requested_backend = _settings.check()
_backend.apply(_requested_backend)

if torch._C._get_privateuse1_backend_name() != "infini":
    torch.utils.rename_privateuse1_backend("infini")

# 3. torch.infini and the generated Tensor/Module/Storage methods.
from . import infini as _infini_module  # noqa: E402

torch._register_device_module("infini", _infini_module)
_infini_module._install_submodules("torch.infini")  # `import torch.infini.streams` too
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
)

from . import cpu_fallback, distributed, ops  # noqa: E402

distributed._register()  # the c10d backend "infini" for torch.distributed

from . import _exit  # noqa: E402

_exit.install()

_compile_cache.install()  # torch.compile's caches keyed to torch_infini's code generation

from . import _patches  # noqa: E402

# Printing infini tensors, init_process_group's default backend on infini,
# aot_eager for infini graphs where Inductor cannot serve them.
_patches.apply()

from ._backend import backend, compiled_backends, is_initialized, set_backend  # noqa: E402
from ._build_info import TORCH_VERSION as built_torch_version  # noqa: E402
from ._build_info import VERSION as __version__  # noqa: E402
from ._operators import OperatorInfo, operators, supported_dtypes  # noqa: E402

__all__ = [
    "OperatorInfo",
    "cpu_fallback",
    "distributed",
    "backend",
    "built_torch_version",
    "compiled_backends",
    "is_initialized",
    "operators",
    "ops",
    "set_backend",
    "supported_dtypes",
    "__version__",
]
