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
re-renders a study, and the notebook shows it (:func:`describe`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mfulab import results
from mfulab.errors import ParameterError
from mfulab.measure import host

STABILITY = "stability.json"
CALIBRATION = "calibration"


def row_keys(claims) -> list[str]:
    """One key per claim row: the id, and ``id (2)``, ``id (3)``... for repeated ids."""
    return numbered_ids(c.id for c in claims)


def numbered_ids(ids) -> list[str]:
    seen: dict[str, int] = {}
    keys = []
    for claim_id in ids:
        seen[claim_id] = seen.get(claim_id, 0) + 1
        keys.append(claim_id if seen[claim_id] == 1 else f"{claim_id} ({seen[claim_id]})")
    return keys


def numeric(metrics: dict) -> dict[str, float]:
    """The headline metrics that are numbers (labels such as a kernel name are left out)."""
    return {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v)
    }


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
) -> Path:
    """Re-run a study's measurement ``n`` times in fresh processes; write ``stability.json``."""
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
                claims, metrics = outcome(records, p)
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


def describe(
    report: dict | None, *, current_library: str | None = None, published: dict | None = None
) -> str:
    """Markdown: how stable this study's verdicts and headline numbers were over fresh runs."""
    if not report:
        return "*No stability record yet: `make stability STUDY=<id> N=3` re-runs the measurement.*"
    n = report["runs"]
    flips = report["flips"]
    lines = [
        f"**Stability** ({n} fresh runs of the `{report['profile']}` profile, {report['measured_at']}): "
        + (
            f"{len(flips)} verdict(s) flipped: {', '.join(flips)}."
            if flips
            else "no verdict flipped."
            if report["verdicts"]
            else "this study decides no claim: only its numbers' drift is shown."
        )
    ]
    if current_library and report.get("library_sha256") != current_library:
        lines.append("*(recorded with an earlier library: re-run `make stability` to refresh it)*")
    assumed = report.get("assumed_run_to_run_drift")
    headline = [(k, v) for k, v in report["drift"].items() if v.get("declared", True)]
    worst = sorted(headline, key=lambda kv: -kv[1]["drift"])
    if worst:
        shown = ", ".join(f"`{k}` {v['drift']:.1%}" for k, v in worst[:4])
        lines.append(f"Largest drift of a headline number (max − min over median): {shown}")
        if assumed is not None:
            lines.append(
                f"(comparisons assume {assumed:.0%} run-to-run drift on each side of an interval unless "
                "their evidence names another; the calibration's numbers are read from its cache here: "
                "their own drift is in `calibration/stability.json`)."
            )
    if published is not None:
        lines.append(against_published(report, published))
    return " ".join(lines)


def against_published(report: dict, published: dict) -> str:
    """This render is one more fresh run of the same profile: do its verdicts agree with every
    stability run, row by row, and how far do its headline numbers sit from the runs' range?
    ``published``: ``{"verdicts": {row: verdict}, "metrics": {key: number}}``."""
    differ = []
    for row, verdict in published["verdicts"].items():
        runs = report["verdicts"].get(row)
        if runs is None or any(v != verdict for v in runs):
            differ.append(f"{row} (this render: {verdict}; runs: {', '.join(runs or ['absent'])})")
    if differ:
        text = f"This render's verdicts differ from the runs' in {len(differ)} row(s): " + "; ".join(differ)
    else:
        text = f"This render, one more fresh run, agrees with all {report['runs']} runs in every row"
    widest = []
    for key, rec in report["drift"].items():
        value = published["metrics"].get(key)
        if not rec.get("declared", True) or value is None or not np.isfinite(value):
            continue
        values = np.array([*rec["values"], value], dtype=float)
        median = float(np.median(values))
        if median:
            widest.append((float(values.max() - values.min()) / abs(median), key))
    if widest:
        drift, key = max(widest)
        text += f"; with it included, the largest headline drift is `{key}` {drift:.1%}"
    return text + "."


def published_outcome(out_dir) -> dict | None:
    """The verdicts (per row key) and numeric headline metrics this render published, read
    back from ``tables/claims.csv`` and ``metrics.json``; ``None`` before the claims exist."""
    import pandas as pd

    claims_csv = Path(out_dir) / "tables" / "claims.csv"
    metrics_json = Path(out_dir) / results.METRICS
    if not claims_csv.exists():
        return None
    df = pd.read_csv(claims_csv)
    metrics = results.read_json(metrics_json) if metrics_json.exists() else {}
    return {"verdicts": dict(zip(numbered_ids(df["id"]), df["verdict"])), "metrics": numeric(metrics)}
