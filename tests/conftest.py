import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    """Calibrations measured by tests go to a temporary folder, never into results/."""
    import tempfile

    os.environ.setdefault("MFULAB_RESULTS_ROOT", tempfile.mkdtemp(prefix="mfulab-test-results-"))


@pytest.fixture
def run_cli(tmp_path):
    """Run ``python -m mfulab ...`` in a subprocess; returns the CompletedProcess."""

    def _run(*args, timeout=600):
        env = {**os.environ, "MACHINE": "testbox"}
        return subprocess.run(
            [sys.executable, "-m", "mfulab", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return _run
