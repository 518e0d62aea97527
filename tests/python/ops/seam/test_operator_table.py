"""torch_infini.operators(): what the bridge registers, as the dispatcher sees it."""

from __future__ import annotations

import torch
import torch_infini
from op_helpers import KERNEL_DTYPES, kernel_dtypes


def test_table_matches_the_dispatcher() -> None:
    routed = set(torch_infini.cpu_fallback.routed_operators())  # fallback, not kernels
    registered = {
        name
        for name in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
        if name.startswith(("aten::", "infini::")) and name not in routed
    }
    assert {info.name for info in torch_infini.operators()} == registered


def test_declared_dtypes_are_what_the_suite_expects() -> None:
    # backend-aware: no float16 add/mul/silu on InfiniRT's cpu (see kernel_dtypes)
    for op in KERNEL_DTYPES:
        declared, expected = set(torch_infini.supported_dtypes(op)), set(kernel_dtypes(op))
        assert declared == expected, (op, sorted(map(str, declared ^ expected)))


def test_unknown_operator_is_a_key_error() -> None:
    try:
        torch_infini.supported_dtypes("aten::tanh")
    except KeyError as error:
        assert "tanh" in str(error)
    else:
        raise AssertionError("supported_dtypes('aten::tanh') should raise KeyError")
