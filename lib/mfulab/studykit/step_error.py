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


KINDS = ("layout", "switch")  # what two modelled configurations differ in (predict.margins)


def decisive_margin(kind: str = "switch", path=HISTORY_FILE) -> float:
    """THE RULE for a verdict decided by the step model, in every chapter: a modelled difference
    decides only beyond this share; inside it the row cannot tell. The share depends on the kind
    of comparison (``studies/predict/margins.py``): ``layout`` for two parallel layouts of one
    model on one cluster, ``switch`` for anything that turns a term on, off or into another (a
    recompute policy, a ZeRO stage, an overlap switch, a framework; and a modelled step against an
    article's). It starts from the 90th percentile of the model's error on the ratio of two
    held-out published runs of one model on one device that differ in that kind of way (the
    latest revision's ``pair_ratio_error_by_kind`` in ``validation_history.yaml``, chapter 09),
    and is the largest 90th percentile that leaving out any one publication gives, where the
    revision recorded it (``p90_one_source_out_max``): the margin rests on a handful of sources,
    so no single source's pairs may place a verdict's line. Older revisions recorded one figure
    over all pairs (``pair_ratio_error``), read where no kind is."""
    return margin_figures(kind, path)["decisive"]


def margin_figures(kind: str = "switch", path=HISTORY_FILE) -> dict:
    """``{"p90", "one_source_out_max", "decisive"}`` of :func:`decisive_margin`'s rule, from the
    latest revision that recorded ``kind``'s figures (the point 90th percentile, the largest one
    with a source left out, and the line a verdict is decided beyond)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    for revision in reversed(read_history(path)):
        of_kind = (revision.get("pair_ratio_error_by_kind") or {}).get(kind) or {}
        p90 = of_kind.get("p90") or (revision.get("pair_ratio_error") or {}).get("p90")
        if p90:
            loso = of_kind.get("p90_one_source_out_max")
            return {"p90": float(p90), "one_source_out_max": loso, "decisive": max(float(p90), loso or 0.0)}
    return {"p90": FALLBACK_MARGIN, "one_source_out_max": None, "decisive": FALLBACK_MARGIN}


def reproduces_ratio(modelled: float, claimed: float, margin: float) -> bool | None:
    """THE RULE for a modelled ratio against an article's (a serial over an overlapped step, a
    naive over a fused one): True when the modelled ratio lies within ``margin`` of the claimed
    one (exp|ln(modelled/claimed)| − 1 ≤ margin) *and* beyond it from 1, so the model sees an
    effect it can tell from its own error; False when it lies beyond ``margin`` of the claimed
    ratio; None otherwise (within the margin of both the claim and no effect)."""
    apart = max(modelled / claimed, claimed / modelled) - 1
    if apart > margin:
        return False
    return True if abs(modelled - 1) >= margin else None


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
        "rests on a modelled ratio of two configurations, which cancels much of that error, and decides only "
        "beyond the 90th percentile of the model's ratio error on held-out published pairs of the same "
        "kind, taken at the largest value leaving out any one publication gives: "
        f"±{LAYOUT_MARGIN:.0%} between two parallel layouts of one model, ±{SWITCH_MARGIN:.0%} "
        "across a switch (a recompute policy, a ZeRO stage, an overlap switch), in every chapter"
        + (
            f" ({by_kind['layout']['pairs']} and {by_kind['switch']['pairs']} pairs; medians "
            f"{by_kind['layout']['median']:.0%} and {by_kind['switch']['median']:.0%})."
            if {"layout", "switch"} <= set(by_kind := last.get("pair_ratio_error_by_kind") or {})
            else "."
        )
    )


LAYOUT_MARGIN = decisive_margin("layout")  # 09's layout rankings (A13's interleaving, the planner)
SWITCH_MARGIN = decisive_margin("switch")  # 02's A4, 03's A8, 04's B7 and A12, 05's A6, 09's A12, ...
