"""The step model's recorded validation, for every chapter that decides a verdict with it.

Chapter 09 (predict) validates the step model (``analytic/step.py``) against published runs and
appends each revision's held-out errors to ``studies/predict/validation_history.yaml``
(its ``history`` module). Chapters 02–05 take at-scale verdicts from the
same model; this module reads that history so each of them can state the model's error beside
its verdicts without importing another study."""

from __future__ import annotations

from pathlib import Path

HISTORY_FILE = "studies/predict/validation_history.yaml"
# THE RULE for a verdict decided by the step model, in every chapter: a modelled difference (two
# layouts', two policies', or a modelled step against an article's) decides only beyond this
# share; inside it the row is analytic only. The step model's held-out median error on published
# runs is of this order (test split 14%, holdouts 10-11%: validation_history.yaml); our reading,
# not a fit, and one figure for every chapter (02's A4, 03's A8, 04's B7 and A12, 08's A12).
DECISIVE_MARGIN = 0.2
HELD_OUT = ("test", "holdout", "holdout-2", "holdout-3")  # the splits never fitted on


def read_history(path=HISTORY_FILE) -> list[dict]:
    """The recorded test errors per model revision (oldest first)."""
    import yaml

    from mfulab.paths import repo_root

    path = Path(path)
    path = path if path.is_absolute() else repo_root() / path
    if not path.exists():
        return []
    return (yaml.safe_load(path.read_text()) or {}).get("revisions") or []


def step_model_error_line(path=HISTORY_FILE) -> str:
    """One sentence for a chapter that decides a verdict with the step model: its latest recorded
    validation (``validation_history.yaml``: the test split and the holdouts, each with the
    constant-utilisation null model beside it), so a reader of that chapter sees how far the
    model's step times sat from published runs it was not fitted on."""
    history = read_history(path)
    if not history:
        return "The step model has no recorded validation in this checkout (chapter 09 records it)."
    last = history[-1]
    parts = []
    for split in HELD_OUT:
        s = last.get(split) or {}
        if s.get("rows_priced"):
            parts.append(
                f"{split}: median |error| {s['median_abs_error']:.0%} over {s['rows_priced']} rows "
                f"(max {s['max_abs_error']:.0%}; null model {s['null_median_abs_error']:.0%})"
            )
    return (
        f"**The step model's error.** Against published runs it was not fitted on (chapter 09, revision "
        f"{last['commit']} of {last['date']}), its step times missed by: " + "; ".join(parts) + ". A verdict "
        "that rests on a difference smaller than this is read with that error in mind: a modelled "
        f"difference decides a verdict only beyond ±{DECISIVE_MARGIN:.0%}, in every chapter."
    )
