"""Run-to-run stability of a study's verdicts: ``make stability STUDY=<id> N=3``.

One run of a study cannot see how much its numbers move between fresh processes (allocator
and page-cache state, frequency, what else the machine runs). This module re-runs a study's
measurement ``n`` times, each in a fresh ``python -m mfulab measure`` process with the same
profile, derives the claims and headline metrics of every run with the study's own
declared ``outcome(records, p)`` (``claims.outcome``, the function its notebook publishes), and writes
``results/<machine>/<study>/stability.json``:

- ``verdicts``: per claim row, the verdict of every run, and ``flips``: the rows whose
  verdict was not the same in every run (the target is none);
- ``drift``: per headline number, (max − min) / |median| over the runs, beside the drift
  that the comparisons assume (:data:`timing.RUN_TO_RUN_DRIFT`).

``STUDY=calibration`` re-measures the machine's calibration ``n`` times in scratch folders
and reports the drift of each calibrated figure. The runner keeps ``stability.json`` when it
re-renders a study, and the notebook shows it (``studykit.stability_report.describe``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mfulab import results
from mfulab.errors import ParameterError
from mfulab.measure import host
from mfulab.studykit.stability_report import numeric, row_keys

STABILITY = "stability.json"
CALIBRATION = "calibration"


def summarize_runs(runs: list[dict], declared=None) -> dict:
    """``runs``: ``[{"verdicts": {row: verdict}, "metrics": {key: number}}, ...]`` →
    verdict per row over the runs, the rows that flipped, and the drift of every number;
    ``declared`` (the metric keys of ``study.yaml``, the study's headline numbers) marks the
    numbers that the ≤ 10% target is about (the others, such as spreads, are reported too)."""
    rows = list(dict.fromkeys(k for r in runs for k in r["verdicts"]))
    verdicts = {row: [r["verdicts"].get(row, "missing") for r in runs] for row in rows}
    flips = [row for row, vs in verdicts.items() if len(set(vs)) > 1]
    keys = list(dict.fromkeys(k for r in runs for k in r["metrics"]))
    drift = {}
    for key in keys:
        values = np.array([r["metrics"][key] for r in runs if key in r["metrics"]], dtype=float)
        median = float(np.median(values))
        spread = float(values.max() - values.min())
        drift[key] = {
            "values": values.tolist(),
            "median": median,
            "drift": spread / abs(median) if median else (0.0 if spread == 0 else float("inf")),
            "declared": declared is None or key in declared,
        }
    worst = max((d["drift"] for d in drift.values() if d["declared"]), default=0.0)
    return {"verdicts": verdicts, "flips": flips, "drift": drift, "max_declared_drift": worst}


def _measure_once(study_id: str, param_file: Path, overrides: dict, out: Path, results_root: Path) -> None:
    from mfulab.paths import MALLOC_ENV

    cmd = [sys.executable, "-m", "mfulab", "measure", study_id, "-f", str(param_file), "--out", str(out)]
    for name, value in overrides.items():
        cmd += ["-p", name, str(value)]
    env = {**os.environ, **MALLOC_ENV, "MFULAB_NO_REEXEC": "1", "MFULAB_RESULTS_ROOT": str(results_root)}
    subprocess.run(cmd, check=True, env=env)


def _calibration_runs(n: int, setting: str, results_root: Path) -> list[dict]:
    """Re-measure the calibration ``n`` times, each in a fresh process and a scratch root."""
    from mfulab.paths import MALLOC_ENV

    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for i in range(n):
            root = Path(scratch) / f"run{i}"
            env = {**os.environ, **MALLOC_ENV, "MFULAB_NO_REEXEC": "1"}
            cmd = [
                sys.executable,
                "-m",
                "mfulab",
                "calibrate",
                "--setting",
                setting,
                "--results-root",
                str(root),
            ]
            subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
            (cal_file,) = root.glob(f"*/calibration/{setting}.json")
            cal = results.read_json(cal_file)
            runs.append({"verdicts": {}, "metrics": calibration_figures(cal)})
    return runs


def calibration_figures(cal: dict) -> dict[str, float]:
    """The calibrated numbers of a calibration file, flat: ceilings, bandwidth, α and β."""
    figures = {}
    for key, rec in cal.get("parts", cal).items():
        if key.startswith("_") or not isinstance(rec, dict):
            continue
        if key.startswith("matmul"):
            figures[f"{key} best_flops_per_s"] = rec["best_flops_per_s"]
        elif key == "bandwidth":
            figures["bandwidth plateau_bytes_per_s"] = rec["plateau_bytes_per_s"]
        elif "alpha_s" in rec:
            figures[f"{key} alpha_s"] = rec["alpha_s"]
            figures[f"{key} link_bytes_per_s"] = rec["link_bytes_per_s"]
    return figures


def run(
    study_id: str,
    *,
    profile: str = "auto",
    n: int = 3,
    overrides: dict | None = None,
    results_root: str | Path | None = None,
    keep: str | Path | None = None,
) -> Path:
    """Re-run a study's measurement ``n`` times in fresh processes; write ``stability.json``.
    ``keep``: a folder that receives the last run's ``measurements.json`` and ``env.json``, so
    that the study renders from it (``make <study> FROM=<keep>``) instead of measuring a fourth
    time: the render is then one of the runs whose verdicts ``stability.json`` records."""
    from mfulab.measure import timing
    from mfulab.measure.procs import stop_on_signals
    from mfulab.paths import library_sha256, read_profile, repo_root
    from mfulab.run.runner import resolve_profile

    if n < 2:
        raise ParameterError(f"N must be at least 2 to compare runs, got {n}")
    root = repo_root()
    results_root = Path(results_root or os.environ.get("MFULAB_RESULTS_ROOT") or root / "results")
    overrides = overrides or {}
    started = time.time()
    import torch

    declared = None  # calibration: every figure is a headline
    if study_id == CALIBRATION:
        setting = "gpu" if profile == "gpu" or (profile == "auto" and torch.cuda.is_available()) else "cpu"
        if profile not in ("auto", "cpu", "gpu", "smoke"):
            raise ParameterError(f"calibration stability takes --profile auto|cpu|gpu|smoke, got {profile!r}")
        setting = "smoke" if profile == "smoke" else setting
        with stop_on_signals(what="the calibration stability runs"):
            runs = _calibration_runs(n, setting, results_root)
        params, final = {"setting": setting}, results_root / host.machine_slug() / CALIBRATION
    else:
        from mfulab.studykit.registry import get

        study = get(study_id)
        if study.reads_results:
            raise ParameterError(
                f"study {study_id!r} measures nothing of its own (it reads other studies' results)"
            )
        profile = resolve_profile(study_id, profile, root)
        param_file = root / "studies" / study_id / f"{profile}.yaml"
        p = study.params.from_dict({**read_profile(param_file), **overrides}).prepared()
        params = p.to_dict()
        outcome = study.outcome_fn()
        declared = {m.key for m in study.metrics}
        runs = []
        with (
            tempfile.TemporaryDirectory() as scratch,
            stop_on_signals(what=f"the stability runs of {study_id}"),
        ):
            for i in range(n):
                print(
                    f"stability of {study_id}: run {i + 1} of {n} (fresh process)",
                    file=sys.stderr,
                    flush=True,
                )
                out = Path(scratch) / f"run{i}"
                t0 = time.time()
                _measure_once(study_id, param_file, overrides, out, results_root)
                records = results.load_measurements(out)
                o = outcome(records, p)
                claims, metrics = o.claims, o.metrics
                if keep and i == n - 1:
                    shutil.rmtree(keep, ignore_errors=True)
                    shutil.copytree(out, keep)
                runs.append(
                    {
                        "verdicts": dict(zip(row_keys(claims), (c.verdict for c in claims))),
                        "metrics": numeric(metrics),
                        "seconds": round(time.time() - t0, 1),
                    }
                )
        final = results_root / host.results_machine(params) / study_id
    report = {
        "study": study_id,
        "profile": profile,
        "runs": n,
        "params": params,
        **summarize_runs(runs, declared),
        "assumed_run_to_run_drift": timing.RUN_TO_RUN_DRIFT,
        "seconds_per_run": [r.get("seconds") for r in runs],
        "library_sha256": library_sha256(None if study_id == CALIBRATION else study_id),
        "torch": torch.__version__,
        "machine": final.parent.name,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
    }
    final.mkdir(parents=True, exist_ok=True)
    results.write_json(final / STABILITY, report)
    return final / STABILITY
