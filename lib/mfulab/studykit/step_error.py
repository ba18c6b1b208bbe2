"""The step model's recorded validation, for every chapter that decides a verdict with it.

Chapter 09 (predict) validates the step model (``analytic/step.py``) against published runs and
appends each revision's held-out errors to ``studies/predict/validation_history.yaml``
(its ``history`` module). Chapters 02–05 take at-scale verdicts from the
same model; this module reads that history so each of them can state the model's error beside
its verdicts without importing another study."""

from __future__ import annotations

from pathlib import Path

HISTORY_FILE = "studies/predict/validation_history.yaml"
HELD_OUT = ("test", "holdout", "holdout-2", "holdout-3", "holdout-4")  # the splits never fitted on
# Where the history predates the ratio errors (older checkouts): the margin the course used before
# it measured them, the order of the model's held-out median error (our reading)
FALLBACK_MARGIN = 0.2


def decisive_margin(path=HISTORY_FILE) -> float:
    """THE RULE for a verdict decided by the step model, in every chapter: a modelled difference
    (two layouts', two policies', or a modelled step against an article's) decides only beyond
    this share; inside it the row cannot tell. It is the 90th percentile of the model's error on
    the ratio of two published runs of one model on one device that it was not fitted on (the
    latest revision's ``pair_ratio_error`` in ``validation_history.yaml``, chapter 09): a modelled
    ratio past it lies outside the model's own ratio error on nine such pairs in ten."""
    for revision in reversed(read_history(path)):
        p90 = (revision.get("pair_ratio_error") or {}).get("p90")
        if p90:
            return float(p90)
    return FALLBACK_MARGIN


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
        f"difference decides a verdict only beyond ±{DECISIVE_MARGIN:.0%}, in every chapter"
        + (
            f", the 90th percentile of its error on the ratio of two held-out runs of one model on one "
            f"device ({ratio['pairs']} pairs; median {ratio['median']:.0%})."
            if (ratio := last.get("pair_ratio_error"))
            else "."
        )
    )


DECISIVE_MARGIN = decisive_margin()  # one figure for every chapter (02's A4, 03's A8, 04's B7 and A12, ...)
