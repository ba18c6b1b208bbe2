"""The outcome of the ``predict`` study: :func:`outcome` fits the step model's one free parameter
on the fit rows, prices every published run, and builds the tables the notebook shows and the
headline metrics, once; the notebook and ``make stability`` call it. The chapter has no claim rows
of its own: its numbers are the validation's, and the stability note compares them."""

from __future__ import annotations

from mfulab.results import run_identity
from mfulab.studies.predict import (
    ablations,
    analysis,
    calibrated,
    margin_types,
    margins,
    memory_check,
    modern,
    scores,
    uncertainty,
    validate,
    worked_examples,
)
from mfulab.studykit.outcome import Outcome


def tables(records, p, valid: dict) -> dict:
    """Every table the chapter shows, computed once from the validation ``valid`` (saved as
    ``tables/<name>.csv``)."""
    df = valid["table"]
    fitted = {validate.FIT_PARAMETER: valid["fitted"]}
    held = df[df.split.isin(validate.HELD_OUT)]
    pairs = margins.kind_pairs(df, records["published_runs"])  # the margins' pairs, built once
    out = {
        "validation": df,
        "splits": scores.split_summary(df),
        "decisive_margin": scores.decisive_margin_check(df),
        "margin_pairs": pairs,  # every pair, auditable
        "kind_margins": margins.kind_table(
            margins.kind_margins(pairs), margins.kind_uncertainty(pairs), margins.kind_null(pairs)
        ),
        "layout_term_margins": margins.layout_term_margins(pairs),
        "switch_type_margins": margin_types.switch_type_margins(pairs),
        "blind_margins": margin_types.blind_margins(
            margins.kind_pairs(df, records["published_runs"], splits=uncertainty.GROUPS["holdouts"])
        ),
        "bootstrap": uncertainty.clustered_bootstrap(df),
        "ratio_errors": uncertainty.ratio_errors(df, records["published_runs"]),
        "as_noted": scores.as_noted_summary(df),
        "per_source": scores.per_source(df),
        "leave_one_source_out": scores.leave_one_source_out(records["published_runs"], fit_grid=p.fit_grid),
        "per_device": scores.per_device(df),
        "ranking": scores.ranking(df),
        "misses": scores.misses(held[held.refused == ""], 0.25, top=5),
        "refused": df[df.refused != ""][["id", "source", "refused"]],
        "memory_check": memory_check.memory_table(df, records["published_runs"]),
        "history": analysis.history_table(records, valid, pairs),
        "modern_rows": modern.rows_table(records["published_runs"], df, valid["fitted"]),
        "modern_sensitivity": modern.sensitivity(records["published_runs"], valid["fitted"]),
        "per_term": scores.per_term_check(records, valid["fitted"]),
        "tp_overlap_pairs": ablations.tp_overlap_pairs(records["published_runs"], df),
        "interleave_sensitivity": analysis.interleave_sensitivity(records, p, valid["fitted"]),
        "sensitivity": analysis.sensitivity(records, p, valid["fitted"]),
        "calibrated_check": calibrated.comparison(records, **fitted),
        "b15_ladder": worked_examples.b15_ladder(**fitted),
        "b15_sensitivity": worked_examples.b15_sensitivity(**fitted),
        "a19_case": worked_examples.a19_case(**fitted),
    }
    rows = out["modern_rows"]
    out["modern_summary"] = modern.summary(rows, df)
    out["modern_bootstrap"] = modern.bootstrap(rows)
    out["fp8_pairs"] = modern.fp8_pairs(records["published_runs"], rows, valid["fitted"])
    out["modern_ranking"] = modern.layout_ranking(rows)
    return out


def outcome(records, p) -> Outcome:
    """No claim rows; the tables and the headline metrics (the fitted share, the split's errors,
    the calibrated step here), each computed once."""
    valid = analysis.validation(records, p)
    t = tables(records, p, valid)
    df = t["validation"]
    values = {
        "test_goals": {split: scores.test_goals(df, split=split) for split in validate.HELD_OUT},
        "refit_on_seen": uncertainty.refit_on_seen(records["published_runs"], df, fit_grid=p.fit_grid),
    }
    return Outcome([], headline_metrics(records, p, valid, t), t, values=values)


def headline_metrics(records, p, valid: dict, t: dict) -> dict:
    """What ``metrics.json`` carries for comparisons across machines (units in the names)."""
    df = valid["table"]
    summary = validate.summary(df, row_goal=p.row_error_goal, median_goal=p.median_error_goal)
    splits = t["splits"].set_index("split")
    check = t["calibrated_check"]
    step = check[check["class"] == "step"].iloc[0]

    def split_metric(name, column):
        return (
            float(splits.loc[name, column])
            if name in splits.index and splits.loc[name, column] is not None
            else None
        )

    def priced_rows(name):
        return int(splits.loc[name, "rows"] - splits.loc[name, "refused"]) if name in splits.index else 0

    return {
        **run_identity(records, "preset", "seq_len", "micro_batch", "dtype"),
        **{k: v for k, v in summary.items() if not k.startswith("goal_met")},
        "goal_met": summary["goal_met"],
        **{
            f"{name.replace('-', '')}_{key}": split_metric(name, key)
            for name in validate.HELD_OUT
            for key in ("median_abs_error", "max_abs_error", "null_median_abs_error")
        },
        **{f"{name.replace('-', '')}_rows": priced_rows(name) for name in validate.HELD_OUT},
        **_modern_metrics(t["modern_summary"]),
        "refused_rows": int((df.refused != "").sum()),
        "fitted_matmul_share_of_mamf": valid["fitted"],
        "default_matmul_share_of_mamf": valid["default"],
        "null_utilisation": valid["null_utilisation"],
        "fit_rows": valid["n_fit"],
        "published_rows": len(df),
        "measured_step_s": records["step"]["median_s"],
        "predicted_step_s": float(step.predicted_s),
        "calibrated_step_error": float(step.error),
        **_paired_metrics(records),
        "calibrated_step_error_op_rates": None if step.isna().error_op_rates else float(step.error_op_rates),
        # the op-rate reading's prediction in seconds: its error sits near zero, where a relative
        # drift over runs means nothing, so the stability report tracks the seconds
        "predicted_step_s_op_rates": None
        if step.isna().predicted_op_rates_s
        else float(step.predicted_op_rates_s),
        **_drift_metrics(records),
    }


def _paired_metrics(records) -> dict:
    """The round-paired step error's median and IQR (``calibrated.paired_summary``)."""
    ps = calibrated.paired_summary(records)
    if ps is None:
        return {}
    return {"calibrated_step_error_paired": ps["median"], "calibrated_paired_iqr": ps["q3"] - ps["q1"]}


def _drift_metrics(records) -> dict:
    """The calibration file's matmul ceiling over the re-timed one, and the step error the file
    alone gives (``calibrated.drift``)."""
    d = calibrated.drift(records)
    if d is None:
        return {}
    return {
        "calibration_file_over_now_matmul": d["file_matmul_flops_per_s"] / d["now_matmul_flops_per_s"],
        "calibration_file_step_error": float(d["file_step_error"]),
    }


def _modern_metrics(summary) -> dict:
    """The fourth holdout priced as noted, and the earlier splits' FP8 rows (``modern.summary``)."""
    s = summary.set_index("rows") if len(summary) else None

    def pick(name, column):
        return float(s.loc[name, column]) if s is not None and name in s.index else None

    held = "holdout-4 (MoE, CP, FP8; as noted)"
    return {
        "holdout4_as_noted_median_abs_error": pick(held, "median_abs_error"),
        "holdout4_as_noted_null_median_abs_error": pick(held, "null_median_abs_error"),
        "holdout4_as_noted_rows": int(pick(held, "priced") or 0),
        "earlier_fp8_median_abs_error": pick("earlier splits: FP8 rows", "median_abs_error"),
    }
