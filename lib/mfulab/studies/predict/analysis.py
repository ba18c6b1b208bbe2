"""Analysis of the ``predict`` study: the validation against the published runs, the
calibrated check on this machine, the articles' cases and ``outcome`` (the metrics the
notebook publishes; the study decides no claim of its own: the articles' claims it applies
to are decided in chapters 01, 04, 08 and 09)."""

from __future__ import annotations

from ...results import run_identity
from . import calibrated, validate


def validation(records, p) -> dict:
    return validate.validation(records["published_runs"], fit_sources=p.fit_sources, fit_grid=p.fit_grid)


def headline_metrics(records, p, valid: dict | None = None) -> dict:
    valid = valid or validation(records, p)
    summary = validate.summary(valid["table"], row_goal=p.row_error_goal, median_goal=p.median_error_goal)
    check = calibrated.comparison(records, **{validate.FIT_PARAMETER: valid["fitted"]})
    step = check[check["class"] == "step"].iloc[0]
    return {
        **run_identity(records, "preset", "seq_len", "micro_batch", "dtype"),
        **summary,
        "fitted_matmul_efficiency": valid["fitted"],
        "fit_rows": valid["n_fit"],
        "published_rows": len(valid["table"]),
        "measured_step_s": records["step"]["median_s"],
        "predicted_step_s": float(step.predicted_s),
        "calibrated_step_error": float(step.error),
    }


def outcome(records, p) -> tuple[list, dict]:
    """No claim rows of its own; the headline metrics (also ``make stability``)."""
    return [], headline_metrics(records, p)


def interleave_sensitivity(records, p, fitted: float):
    """Rows whose interleaving depth is unstated, under both stated rules."""
    import pandas as pd

    rows = []
    for row in records["published_runs"]:
        if (row.get("unstated") or {}).get("vpp") != "interleaved":
            continue
        for rule in ("deepest", "smallest"):
            r = validate.predict_row(row, interleave_rule=rule, **{validate.FIT_PARAMETER: fitted})
            rows.append({"id": r["id"], "rule": rule, "vpp": r["vpp"], "error": r["error"]})
    return pd.DataFrame(rows).pivot(index="id", columns="rule", values=["vpp", "error"])


def likely_cause(row) -> str:
    """The largest non-compute term of a row, named for a reader: where a miss most likely
    comes from when the compute terms are calibrated on other rows."""
    from ... import predict

    side = {k: row[k] for k in predict.TERMS if k not in ("matmul_s", "attention_s", "memory_bound_s")}
    term, seconds = max(side.items(), key=lambda kv: kv[1])
    return f"{term.removesuffix('_s')} ({seconds / row['predicted_step_s']:.0%} of the predicted step)"


def misses(df, goal: float):
    """Rows beyond ``goal`` (or the three largest |errors| when none is) with the term most
    likely responsible."""
    import pandas as pd

    ranked = df.reindex(df.error.abs().sort_values(ascending=False).index)
    shown = ranked[ranked.error.abs() > goal]
    shown = shown if len(shown) else ranked.head(3)
    return pd.DataFrame(
        {
            "id": shown.id,
            "error": shown.error,
            "largest non-compute term": [likely_cause(r) for _, r in shown.iterrows()],
        }
    )


def sensitivity(records, p, fitted: float):
    """Median and largest |error| over the published rows with each assumption moved ±25%
    around its default (the fitted parameter held at its fitted value)."""
    import numpy as np
    import pandas as pd

    from ...predict_rates import Assumptions

    base = Assumptions()
    rows = []
    for name in (
        "memory_efficiency",
        "link_efficiency",
        "flash_attention_efficiency",
        "backward_traffic_factor",
        "alpha_inter_s",
    ):
        for factor in (0.75, 1.25):
            value = getattr(base, name) * factor
            if name.endswith("efficiency"):
                value = min(value, 1.0)
            errors = np.abs(
                [
                    validate.predict_row(r, **{validate.FIT_PARAMETER: fitted, name: value})["error"]
                    for r in records["published_runs"]
                ]
            )
            rows.append(
                {
                    "assumption": name,
                    "value": value,
                    "median_abs_error": float(np.median(errors)),
                    "max_abs_error": float(errors.max()),
                }
            )
    return pd.DataFrame(rows)


def summary_text(summary: dict, p) -> str:
    met = "met" if summary["goal_met"] else "**not met**"
    return (
        f"Median |error| **{summary['published_median_abs_error']:.1%}** (goal ≤ {p.median_error_goal:.0%}), "
        f"largest **{summary['published_max_abs_error']:.1%}** (goal ≤ {p.row_error_goal:.0%} for every "
        "row): "
        f"{summary['published_rows_within_goal']:.0%} of the rows within it; goal {met}. Rows outside the "
        "fitted "
        f"subset: median |error| {summary['out_of_subset_median_abs_error']:.1%}. Leave-one-out on the "
        "fitted "
        f"subset: median {summary['published_loo_median_abs_error']:.1%}, largest over all rows "
        f"{summary['published_loo_max_abs_error']:.1%}."
    )


def calibrated_text(records, check) -> str:
    step = check[check["class"] == "step"].iloc[0]
    classes = check[~check["class"].isin(["step"]) & check.measured_s.gt(0)]
    worst = classes.reindex(classes.error.abs().sort_values(ascending=False).index).iloc[0]
    return (
        f"Measured step **{step.measured_s * 1e3:.1f} ms** (IQR {records['step']['iqr_s'] * 1e3:.1f} ms over "
        f"{records['step']['n']} steps), predicted from the calibration **{step.predicted_s * 1e3:.1f} ms** "
        f"({step.error:+.1%}). The class furthest off is *{worst['class']}* ({worst.error:+.0%}); the "
        "flash-attention "
        "efficiency the predictor assumes is a GPU figure (FlashAttention-2 on A100) that no calibration "
        "measures."
    )


def b15_text(ladder) -> str:
    base, last = ladder.iloc[0], ladder.iloc[-1]
    credited = ladder.dropna(subset=["predicted_gain_s"])
    top = credited.loc[credited.predicted_gain_s.idxmax()]
    return (
        f"Predicted baseline **{base.predicted_step_s:.2f} s** against the article's {base.article_step_s} "
        "s, and "
        f"**{last.predicted_step_s:.2f} s** after the last rung against {last.article_step_s} s. The "
        "predictor credits "
        f"the largest gain to *{top.rung}* ({top.predicted_gain_s:.2f} s; the article: "
        f"{top.article_gain_s:.1f} s). "
        "The article's baseline trace shows the data arriving 1.5 s into each step, yet its data-loader "
        "rung saves "
        f"{ladder.article_gain_s.iloc[4]:.1f} s: if the wait was 1.5 s and it 'basically disappeared', the "
        "rung should "
        "have saved about 1.5 s — the two statements cannot both hold unless most of the wait was already "
        "hidden."
    )


def a19_text(a19) -> str:
    lo, hi = a19.predicted_step_s.min(), a19.predicted_step_s.max()
    return (
        f"The stated layout predicts **{lo:.2f}–{hi:.2f} s** per step (MFU {a19.mfu_palm.min():.0%}–"
        f"{a19.mfu_palm.max():.0%}, PaLM convention) against the stated 2.4 s. Chapter 01 checks the "
        "article's "
        "arithmetic (its ×3 on 6N); here the question is only what the stated hardware and layout allow."
    )
