"""How a study's ``stability.json`` reads under its claims table: the verdicts and headline
drift of the fresh runs ``make stability`` made (``run.stability`` writes the file), and whether
this render, one more fresh run, agrees with them. Read-only: nothing here measures, so a
notebook can show the note without importing the runner.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mfulab import results


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
