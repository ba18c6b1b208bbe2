import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_check(kind: str, tmp_path):
    """``python -m mfulab check <kind>`` as a user runs it: the process and its summary.json."""
    import json

    proc = subprocess.run(
        [sys.executable, "-m", "mfulab", "check", kind, "--out", str(tmp_path / kind)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return proc, json.loads((tmp_path / kind / "summary.json").read_text())


def pytest_configure(config):
    """Calibrations measured by tests go to a temporary folder, never into results/."""
    import tempfile

    os.environ.setdefault("MFULAB_RESULTS_ROOT", tempfile.mkdtemp(prefix="mfulab-test-results-"))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # make test runs one worker per core: a worker's own torch ops on every core would contend
        # with the other worker's (small ops under OpenMP slow down many times over). Studies and
        # ranks the tests start run in their own processes with their own thread settings.
        import torch

        torch.set_num_threads(1)
    config.addinivalue_line("markers", "cuda: needs one CUDA GPU (skipped, with the reason, elsewhere)")
    config.addinivalue_line("markers", "multigpu: needs two or more CUDA GPUs on this node (NCCL)")
    config.addinivalue_line(
        "markers",
        "slow: minutes with cold caches (compiles, study smoke runs): left out of check gpu --quick",
    )


def pytest_collection_modifyitems(config, items):
    """``cuda`` and ``multigpu`` tests run where the GPUs are and skip with their reason
    elsewhere (``pytest -m cuda`` selects them on a GPU machine)."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    reasons = {
        "cuda": None if gpus >= 1 else "needs a CUDA GPU; this machine has none",
        "multigpu": None if gpus >= 2 else f"needs 2+ CUDA GPUs for NCCL; this machine has {gpus}",
    }
    for item in items:
        for marker, reason in reasons.items():
            if reason and item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def tests_on_path(monkeypatch):
    """Ranks started by torchrun import ``tests/workers.py`` and this checkout's ``lib``."""
    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join([str(ROOT / "tests"), str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")]),
    )


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
