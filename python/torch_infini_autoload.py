"""PyTorch's device-backend autoload hook for torch-infini.

The wheel declares it in the entry-point group ``torch.backends``, so
``import torch`` imports ``torch_infini`` and the ``infini`` device is ready
(``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns autoloading off).

It lives outside the ``torch_infini`` package on purpose: PyTorch turns an
exception raised by an autoloaded backend into a failure of ``import torch``
itself. A torch_infini that cannot load (another PyTorch than the one it was
built for, a bad ``TORCH_INFINI_BACKEND``, missing vendor libraries) raises
before it registers anything; here that becomes one warning, and an explicit
``import torch_infini`` raises the error itself.
"""

from __future__ import annotations

import warnings


def load() -> None:
    try:
        import torch_infini  # noqa: F401
    except Exception as error:  # any failure must leave `import torch` working
        warnings.warn(
            f"torch_infini was not loaded by `import torch` ({type(error).__name__}: {error}); "
            "`import torch_infini` raises the error. TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns "
            "autoloading off.",
            RuntimeWarning,
            stacklevel=2,
        )
