"""The pending tests run with the Python suite's helpers and configuration
(tests/python/conftest.py: markers, fallback policy, tools/ on the path)."""

import sys
from pathlib import Path

_PYTHON_TESTS = str(Path(__file__).resolve().parents[1] / "python")
if _PYTHON_TESTS not in sys.path:
    sys.path.insert(0, _PYTHON_TESTS)

from conftest import *  # noqa: E402, F403
from conftest import pytest_configure, pytest_runtest_setup  # noqa: E402, F401
