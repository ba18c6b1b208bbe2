"""The validation history of the step model: ``python -m mfulab.studies.predict.history
--change "what changed"`` evaluates the published rows at the current commit and appends one
revision to ``studies/predict/validation_history.yaml`` (commit, date, what changed, the
fitted share, the errors of the test, holdout, holdout-2, holdout-3, holdout-4 and development
rows). Run it after every change to the step model, from a clean tree, and commit the file:
the test error of every
revision stays on record, so a model tuned on its test rows shows as a run of revisions with
the test error falling."""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess

from mfulab.errors import ParameterError
from mfulab.studies.predict import margins, scores, validate

PUBLISHED = "studies/predict/published_runs.yaml"
FIT_GRID = (0.5, 1.0, 0.0025)


def evaluate(path=PUBLISHED) -> dict:
    """The numbers one revision records."""
    data = validate.load_file(path)
    fit_sources = tuple(data["split"].get("fit") or ())
    res = validate.validation(data["runs"], fit_sources=fit_sources, fit_grid=FIT_GRID)
    splits = scores.split_summary(res["table"]).set_index("split")

    def pick(name):
        if name not in splits.index:
            return None
        r = splits.loc[name]
        return {
            "rows_priced": int(r.rows - r.refused),
            "median_abs_error": round(float(r.median_abs_error), 4),
            "max_abs_error": round(float(r.max_abs_error), 4),
            "null_median_abs_error": round(float(r.null_median_abs_error), 4),
        }

    noted = scores.as_noted_summary(res["table"]).set_index("split") if len(res["table"]) else None

    def pick_noted(name):
        if noted is None or name not in noted.index:
            return None
        r = noted.loc[name]
        return {
            "rows_priced": int(r.rows_priced_as_noted),
            "median_abs_error": round(float(r.median_abs_error), 4),
            "max_abs_error": round(float(r.max_abs_error), 4),
            "null_median_abs_error": round(float(r.null_median_abs_error), 4),
        }

    return {
        "fitted_share_of_mamf": res["fitted"],
        # the size of the model's error on a ratio of two held-out runs of one model on one device
        # (the pairs a chapter's layout comparison resembles): its 90th percentile is the course's
        # margin before the kinds were recorded (studykit.step_error reads it where no kind is)
        "pair_ratio_error": pair_ratio_error(res["table"], data["runs"]),
        # the same, per kind of comparison (``margins``): each kind's 90th percentile is the
        # decisive margin of a chapter comparison of that kind (studykit.step_error)
        # with how far one source moves it (``margins.kind_uncertainty``): the decisive line is the
        # largest 90th percentile with one source left out (studykit.step_error.decisive_margin)
        "pair_ratio_error_by_kind": kind_figures(margins.kind_pairs(res["table"], data["runs"])),
        "test": pick("test"),
        "holdout": pick("holdout"),
        "holdout-2": pick("holdout-2"),
        "holdout-3": pick("holdout-3"),
        "holdout-4": pick("holdout-4"),
        "development": pick("development"),
        "fit_loo": pick("fit"),
        # rows with a feature the model lacks (refused above), priced as their notes say
        "as_noted": {name: pick_noted(name) for name in validate.HELD_OUT if pick_noted(name)},
    }


def kind_figures(pairs) -> dict:
    """:func:`margins.kind_margins` per kind, with the bootstrap interval of its 90th percentile
    and the lowest and highest 90th percentile with one source left out
    (:func:`margins.kind_uncertainty`)."""
    by_kind = margins.kind_margins(pairs)
    unc = margins.kind_uncertainty(pairs)
    keys = ("p90_lo", "p90_hi", "p90_one_source_out_min", "p90_one_source_out_max")
    return {k: {**v, **{f: unc[k][f] for f in keys if k in unc}} for k, v in by_kind.items()}


def pair_ratio_error(table, runs) -> dict | None:
    """Pairs, median and 90th percentile of the ratio errors between held-out rows of one source,
    model and device (``uncertainty.ratio_errors``, every held-out split)."""
    from mfulab.studies.predict import uncertainty

    r = uncertainty.ratio_errors(table, runs)
    r = r[(r.group == "all held out") & (r.pairs_within == "one source, model and device")]
    if not len(r):
        return None
    row = r.iloc[0]
    return {
        "pairs": int(row.pairs),
        "median": round(float(row.median_ratio_error), 4),
        "p90": round(float(row.p90_ratio_error), 4),
    }


def record(change: str, *, path=validate.HISTORY_FILE) -> dict:
    import yaml

    root = validate._repo_path(".")
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "lib", "studies/predict"],
        cwd=root,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if dirty:
        raise ParameterError("commit the model first: the history records a commit, and the tree has changes")
    commit = subprocess.run(
        ["git", "rev-parse", "--short=7", "HEAD"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.strip()
    entry = {"commit": commit, "date": dt.date.today().isoformat(), "change": change, **evaluate()}
    file = validate._repo_path(path)
    data = (yaml.safe_load(file.read_text()) if file.exists() else None) or {}
    data.setdefault("revisions", []).append(entry)
    file.write_text(HEADER + yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True))
    return entry


HEADER = """\
# The step model's validation history (python -m mfulab.studies.predict.history): one entry per
# model revision, appended after the change is committed. `test` rows were first evaluated at
# the freeze (published_runs.yaml split.frozen_at), the holdouts at theirs (<split>_frozen_at in
# their files); entries before a split's freeze carry no figures for it, and the development
# errors before the freeze are read from the committed renders of results/cpu-2c/predict.
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mfulab.studies.predict.history", description=__doc__)
    ap.add_argument("--change", required=True, help="what changed in the model since the last entry")
    args = ap.parse_args(argv)
    try:
        entry = record(args.change)
    except ParameterError as err:
        print(f"error: {err}")
        return 2
    print(entry)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
