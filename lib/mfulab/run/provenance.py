"""The ``env.json`` record of a run: the machine fingerprint, versions, git state, parameters,
times, the command line and the environment variables that change results."""

from __future__ import annotations

import subprocess
import time

from mfulab.measure import jobinfo
from mfulab.measure.host import fingerprint


def git_state(repo_root) -> dict:
    """Commit and dirty flag of the code (changes under results/ do not count as dirty)."""

    def git(*args):
        out = subprocess.run(["git", *args], cwd=repo_root, capture_output=True, text=True, timeout=30)
        return out.stdout.strip() if out.returncode == 0 else None

    try:
        commit = git("rev-parse", "HEAD")
        status = git("status", "--porcelain", "--", ".", ":!results")
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def provenance(*, study: str, params: dict, repo_root, started_s: float, extra: dict | None = None) -> dict:
    """The ``env.json`` record: machine fingerprint, versions, git state, parameters, times,
    the command line, the environment variables that change results and, on NVIDIA machines,
    driver, clocks, power, ECC and topology (:mod:`mfulab.measure.jobinfo`)."""
    env = {
        "study": study,
        "fingerprint": fingerprint(),
        "command": jobinfo.command_line(),
        "environment": jobinfo.result_environment(),
        "nvidia": jobinfo.nvidia_report(),
        "git": git_state(repo_root),
        "params": params,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started_s)),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "duration_s": time.time() - started_s,
    }
    env.update(extra or {})
    return env
