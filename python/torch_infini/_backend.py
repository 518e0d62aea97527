"""Backend selection: which provider serves the `infini` device.

``TORCH_INFINI_BACKEND`` (``auto``, ``host``, or an InfiniRT device type such
as ``cpu`` or ``nvidia``) is read once, at import. ``auto`` picks the first
InfiniRT accelerator type with a device, else InfiniRT's CPU backend, else the
built-in ``host`` reference device. The runtime initializes on first use;
after that the backend cannot change.
"""

from __future__ import annotations

import os

ENV_VAR = "TORCH_INFINI_BACKEND"


def known_backends() -> tuple[str, ...]:
    """Every name TORCH_INFINI_BACKEND may take in some build: ``auto``,
    ``host`` and InfiniRT's device types, read from the native device-type
    table (native/runtime/include/torch_infini/runtime/device_types.h)."""
    from . import _C

    return ("auto", "host", *_C._infinirt_device_types())


def requested_from_environment() -> str:
    """The requested backend; ImportError for a name no build knows.

    Checked before the device is renamed or the backend selected.
    """
    value = os.environ.get(ENV_VAR, "").strip() or "auto"
    known = known_backends()
    if value not in known:
        raise ImportError(
            f"torch_infini: {ENV_VAR}={value!r} is not a backend; choose one of {', '.join(known)}"
        )
    return value


def apply(name: str) -> None:
    """Hands the request to the native layer; eager init for explicit names.

    An explicit backend that cannot be served (not compiled in, no device)
    fails here, at import, with the reason.
    """
    from . import _C

    try:
        _C._select_backend(name)
        if name != "auto":
            _C._init()
    except RuntimeError as exc:
        raise ImportError(f"torch_infini: {ENV_VAR}={name}: {exc}") from exc


def backend() -> str:
    """The selected backend's name ("host", "cpu", "nvidia", ...).

    Initializes the runtime if nothing has used it yet.
    """
    from . import _C

    _C._init()
    return _C._backend()


def host_addressable() -> bool:
    """Whether the selected backend's device memory is host memory (the CPU
    reads and writes it through plain pointers: ``host``, InfiniRT ``cpu``).

    Initializes the runtime if nothing has used it yet.
    """
    from . import _C

    _C._init()
    return bool(_C._capabilities()["host_addressable"])


def set_backend(name: str) -> None:
    """Selects a backend before the runtime is initialized.

    Raises RuntimeError once the runtime is initialized with another backend.
    """
    from . import _C

    _C._select_backend(name)


def is_initialized() -> bool:
    from . import _C

    return bool(_C._is_initialized())


def compiled_backends() -> list[str]:
    """Backends this build can serve besides ``auto``."""
    from . import _C

    return list(_C._compiled_backends())
