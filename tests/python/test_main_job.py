"""The main job (README command 1) runs and checks itself against the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama.py"


def test_llama_trains_and_generates_as_on_the_cpu() -> None:
    # Fewer steps than the default: the task is not learned, but losses and
    # generated tokens must still be the CPU's (the script exits 1 otherwise).
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "40"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "largest relative difference" in out and "-> ok" in out
    assert "ran on the CPU (fallback):" in out
    if "backend: host" in out:
        assert "generated tokens equal the CPU's -> ok" in out
