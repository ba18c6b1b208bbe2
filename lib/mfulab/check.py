"""``make check-gpu`` and ``make check-node``: the first commands on a new GPU machine or
node, before any study is trusted there.

Each prints one line per part — ``ran``, ``skipped (why)`` or ``failed (where)`` — keeps the
details (the environment report, every part's output, the measurements) in
``scratch/check-<kind>/`` to send back when something fails, and exits non-zero when a part
failed. Without CUDA the CPU-side parts still run: the environment report, the profiles'
validation, and for ``node`` a rehearsal of every node check over gloo ranks on the CPU.

- ``gpu``: environment report; the CUDA tests (``pytest -m "cuda or multigpu"``); every gpu
  profile validated on this machine, and its predicted peak within 90% of the card (the memory
  guard, :func:`memory_guard`); a tiny ``cuda`` run of every study through ``python -m
  mfulab measure`` (its smoke profile with ``device: cuda``; the collectives studies need two
  GPUs and are left to ``node``), each within :data:`STUDY_BUDGET_S`.
- ``node``: every multi-rank study's smoke profile over NCCL on every local GPU, through the
  launcher and through an in-process ``torchrun``. Checks: exit 0 on every rank, every rank
  recorded, one rank writing, the process group destroyed, and each study's own
  (``studies/<id>/checks.py``: zero wrong elements, communication bars no shorter than half
  the measured communication, real compute within 2× of its target, DDP gradients equal to
  the reference).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import hardware, jobinfo, results

STUDY_BUDGET_S = 300  # one tiny study run; a run past it is a failure (the time guard)
PROFILE_CARD_BYTES = 80e9  # the gpu profiles are written for an 80 GB card (A100 / H100 SXM)
MEMORY_GUARD_SHARE = 0.9  # a profile's predicted peak must leave 10% of the card free


@dataclass
class Part:
    name: str
    status: str  # ran | skipped | failed
    detail: str = ""

    def line(self) -> str:
        return f"{self.name:<34} {self.status}" + (f" ({self.detail})" if self.detail else "")


def _studies() -> tuple[list, list]:
    """The measuring studies on one GPU (a ``device`` parameter) and those that start their
    own ranks (an ``nproc`` parameter), from the registry."""
    from .studies import REGISTRY

    measuring = [s for s in REGISTRY.values() if s.measure]
    collective = [s for s in measuring if "nproc" in s.params.names()]
    single = [s for s in measuring if "device" in s.params.names() and s not in collective]
    return single, collective


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _run(cmd: list[str], out: Path, name: str, timeout_s: float, env: dict | None = None) -> tuple[int, str]:
    """Run ``cmd`` from the repository root; its output goes to ``out/<name>.log``. Returns the
    exit code (124 past ``timeout_s``) and the log."""
    from .runner import repo_root

    env = {**os.environ, "PYTHONPATH": str(repo_root() / "lib"), "MFULAB_NO_REEXEC": "1", **(env or {})}
    try:
        proc = subprocess.run(
            cmd, cwd=repo_root(), env=env, capture_output=True, text=True, timeout=timeout_s
        )
        code, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        code = 124
        log = f"{e.stdout or ''}{e.stderr or ''}\n--- stopped after {timeout_s:.0f} s ---"
    (out / f"{name}.log").write_text(log if isinstance(log, str) else log.decode(errors="replace"))
    return code, log


def _where(log: str) -> str:
    lines = [ln.strip() for ln in log.strip().splitlines() if ln.strip()]
    return lines[-1][:160] if lines else "no output"


def _measure(study: str, out: Path, overrides: dict, *, torchrun_ranks: int = 0) -> tuple[int, str, Path]:
    from .runner import repo_root

    dest = out / (f"{study}-torchrun" if torchrun_ranks else study)
    cmd = [
        sys.executable,
        "-m",
        "mfulab",
        "measure",
        study,
        "-f",
        str(repo_root() / "studies" / study / "smoke.yaml"),
    ]
    for key, value in overrides.items():
        cmd += ["-p", key, str(value)]
    cmd += ["--out", str(dest)]
    if torchrun_ranks:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            str(torchrun_ranks),
            "--rdzv_backend",
            "c10d",
            "--rdzv_endpoint",
            "localhost:0",
            *cmd[1:],
        ]
    code, log = _run(cmd, out, dest.name, STUDY_BUDGET_S)
    return code, log, dest


def environment_report(out: Path) -> Part:
    import torch

    report = {
        "fingerprint": hardware.fingerprint(),
        "environment": jobinfo.result_environment(),
        "nvidia": jobinfo.nvidia_report(),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
    }
    results.write_json(out / "environment.json", report)
    fp = report["fingerprint"]
    return Part("environment report", "ran", f"{fp['machine']}, torch {fp['torch']}, CUDA {fp['cuda']}")


def cuda_tests(out: Path) -> Part:
    if not _gpus():
        return Part("CUDA tests", "skipped", "no CUDA device: they skip here with their reason")
    code, log = _run(
        [sys.executable, "-m", "pytest", "-q", "-m", "cuda or multigpu", "tests"], out, "cuda-tests", 1800
    )
    return Part("CUDA tests", "ran" if code == 0 else "failed", _where(log))


def gpu_profiles(gpus: int) -> list[Part]:
    """Every gpu/node/cluster profile validated against this machine (device, GPU count)."""
    from .config import ParameterError
    from .runner import read_profile, repo_root
    from .studies import REGISTRY

    parts = []
    for study_id in sorted(REGISTRY):
        for name in ("gpu", "node", "cluster"):
            path = repo_root() / "studies" / study_id / f"{name}.yaml"
            if not path.exists():
                continue
            label = f"profile {study_id}/{name}"
            if not gpus:
                parts.append(Part(label, "skipped", "no CUDA device to validate it against"))
                continue
            try:
                REGISTRY[study_id].params.from_dict(read_profile(path)).prepared()
                parts.append(Part(label, "ran", "valid on this machine"))
            except ParameterError as e:
                status = "skipped" if "GPUs" in str(e) else "failed"
                parts.append(Part(label, status, str(e)[:160]))
    return parts


def memory_guard(card_bytes: float | None = None) -> list[Part]:
    """Every gpu/node/cluster profile's predicted peak (``Params.predicted_peak_bytes``) against
    ``MEMORY_GUARD_SHARE`` of the card: this GPU's memory, or without one the 80 GB card the
    profiles are written for."""
    from .runner import read_profile, repo_root
    from .studies import REGISTRY

    if card_bytes is None:
        card_bytes = PROFILE_CARD_BYTES
        if _gpus():
            import torch

            card_bytes = torch.cuda.get_device_properties(0).total_memory
    parts = []
    for study_id in sorted(REGISTRY):
        for name in ("gpu", "node", "cluster"):
            path = repo_root() / "studies" / study_id / f"{name}.yaml"
            if not path.exists():
                continue
            peak = REGISTRY[study_id].params.from_dict(read_profile(path)).predicted_peak_bytes()
            label = f"memory guard {study_id}/{name}"
            if peak is None:
                parts.append(Part(label, "skipped", "its peak is small or not modelled"))
                continue
            share = peak / card_bytes
            detail = f"predicted {peak / 2**30:.1f} GiB = {share:.0%} of a {card_bytes / 1e9:.0f} GB card"
            parts.append(Part(label, "ran" if share <= MEMORY_GUARD_SHARE else "failed", detail))
    return parts


def tiny_study_runs(out: Path, gpus: int) -> list[Part]:
    parts = []
    single, collective = _studies()
    for study in (s.id for s in single):
        label = f"tiny cuda run: {study}"
        if not gpus:
            parts.append(Part(label, "skipped", "no CUDA device"))
            continue
        t0 = time.time()
        code, log, _ = _measure(study, out, {"device": "cuda"})
        took = f"{time.time() - t0:.0f} s"
        if code == 124:
            parts.append(Part(label, "failed", f"over its {STUDY_BUDGET_S} s budget"))
        else:
            parts.append(Part(label, "ran" if code == 0 else "failed", took if code == 0 else _where(log)))
    for study in collective:
        parts.append(
            Part(f"tiny cuda run: {study.id}", "skipped", "collectives need 2+ GPUs: make check-node")
        )
    return parts


def run_checks(dest: Path, code: int, log: str, ranks: int, checks=None) -> tuple[str, str]:
    """The checks every multi-rank run must pass (exit 0, every rank recorded, one rank
    writing, the process group torn down) and the study's own (``checks(records)``)."""
    if code != 0:
        return "failed", _where(log)
    problems = list(checks(results.load_measurements(dest))) if checks else []
    env = results.read_json(dest / results.ENV)
    # in-process: the ranks that measured; through the launcher: the ranks of its jobs
    seen = max([len(env.get("ranks", []))] + [j["world_size"] for j in env.get("jobs", [])])
    if seen != ranks:
        problems.append(f"env.json records {seen} ranks, expected {ranks}")
    if log.count("measurements written to") != 1:
        problems.append(f"'measurements written' printed {log.count('measurements written to')} times")
    if "has NOT been destroyed" in log:
        problems.append("a process group was not destroyed")
    return ("failed", "; ".join(problems)[:300]) if problems else ("ran", "all checks hold")


def node_parts(out: Path, gpus: int) -> list[Part]:
    """Every multi-rank study through the launcher and through an in-process torchrun."""
    device, ranks = ("cuda", gpus) if gpus >= 2 else ("cpu", 2)
    how = "NCCL" if device == "cuda" else "gloo rehearsal on the CPU (no 2 GPUs here)"
    overrides = {"device": device, "nproc": ranks}
    parts = []
    for study in _studies()[1]:
        for torchrun in (0, ranks):
            path = "in-process torchrun" if torchrun else "launcher"
            code, log, dest = _measure(study.id, out, overrides, torchrun_ranks=torchrun)
            status, detail = run_checks(dest, code, log, ranks, study.node_checks_fn())
            parts.append(Part(f"{study.id}, {ranks} ranks, {path}", status, f"{how}: {detail}"))
    return parts


def main(kind: str, out: str | Path | None = None) -> int:
    from .runner import repo_root

    out = Path(out or repo_root() / "scratch" / f"check-{kind}")
    out.mkdir(parents=True, exist_ok=True)
    gpus = _gpus()
    parts = [environment_report(out)]
    if kind == "gpu":
        parts += [cuda_tests(out), *gpu_profiles(gpus), *memory_guard(), *tiny_study_runs(out, gpus)]
    else:
        parts += node_parts(out, gpus)
    for part in parts:
        print(part.line(), flush=True)
    (out / "summary.json").write_text(json.dumps([p.__dict__ for p in parts], indent=1))
    failed = [p for p in parts if p.status == "failed"]
    print(
        f"{len(parts) - len(failed)} of {len(parts)} parts ran or were skipped with their reason; "
        + (f"{len(failed)} failed: send back the folder {out}" if failed else f"details in {out}")
    )
    return 1 if failed else 0
