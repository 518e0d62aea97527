"""The pending tests run with the Python suite's helpers and configuration
(tests/python/conftest.py: markers, fallback policy, tools/ on the path)."""

import importlib.util
import sys
from pathlib import Path

_PYTHON_TESTS = Path(__file__).resolve().parents[1] / "python"
if str(_PYTHON_TESTS) not in sys.path:
    sys.path.insert(0, str(_PYTHON_TESTS))

_spec = importlib.util.spec_from_file_location(
    "python_suite_conftest", _PYTHON_TESTS / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)

pytest_configure = _suite.pytest_configure
pytest_runtest_setup = _suite.pytest_runtest_setup
_restore_infini_state = _suite._restore_infini_state
