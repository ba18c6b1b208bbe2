"""The step model on MoE, context-parallel and FP8 steps (``analytic/step_modern``): the rows of
the fourth holdout, priced as their notes say, term by term; the FP8 and context-parallel rows of
the earlier splits that the model refused before it priced them; and how the three named
assumptions it adds (``fp8_matmul_relative_efficiency``, ``ep_a2a_exposed``,
``moe_load_imbalance``) move their errors. The defaults were fixed before any of these rows was
priced (``holdout-4_frozen_at``); the sensitivity is read after, and changes no default."""

from __future__ import annotations

import numpy as np

from mfulab.analytic import step as step_model
from mfulab.studies.predict import validate

SPLIT = "holdout-4"
# the named assumptions step_modern adds, and the values the sensitivity table moves them to
SENSITIVITY = {
    "fp8_matmul_relative_efficiency": (1.0, 0.75, 0.5),
    "ep_a2a_exposed": (1.0, 0.5, 0.0),
    "moe_load_imbalance": (1.0, 1.25),
}
SHOWN_TERMS = (
    "matmul_s",
    "attention_s",
    "memory_bound_s",
    "tp_comm_s",
    "ep_comm_s",
    "cp_comm_s",
    "pp_bubble_s",
)


def _kind(row: dict) -> str:
    layout, model = row["layout"], row["model"]
    parts = ["MoE"] if model.get("moe") else []
    parts += ["MLA"] if model.get("mla") else []
    parts += [f"CP {layout['context_parallel']}"] if layout.get("context_parallel", 1) > 1 else []
    dtype = layout.get("dtype", "bf16")
    parts += [dtype.upper() if dtype != "bf16" else "BF16"]
    return " · ".join(parts)


def is_new_kind(row: dict) -> bool:
    """A row the model refused before it priced MoE, context parallelism and FP8."""
    layout = row["layout"]
    return bool(
        row["model"].get("moe")
        or layout.get("context_parallel", 1) > 1
        or layout.get("dtype", "bf16") in step_model.FP8_DTYPES
    )


def rows_table(runs, df, fitted: float):
    """Every row of the fourth holdout (priced as noted: every one names a feature the model
    lacks) and every FP8 / context-parallel row of the earlier splits, with its error, the null
    model's, and each term's share of the predicted step."""
    import pandas as pd

    null = df.set_index("id").null_error
    out = []
    for row in runs:
        if not is_new_kind(row):
            continue
        noted = row.get("split") == SPLIT
        r = validate.predict_row(row, price_not_modelled=noted, **{validate.FIT_PARAMETER: fitted})
        entry = {
            "id": row["id"],
            "split": row.get("split"),
            "kind": _kind(row),
            "device": row["device"],
            "published_step_s": r["published_step_s"],
            "predicted_step_s": r["predicted_step_s"],
            "error": r["error"],
            "null_error": float(null.get(row["id"], np.nan)) if not noted else _null(runs, df, row),
            "priced": "as noted"
            if noted and not r["refused"]
            else ("refused" if r["refused"] else "as stated"),
            "refused": r["refused"],
        }
        for term in SHOWN_TERMS:
            entry[f"{term.removesuffix('_s')}_share"] = (
                r[term] / r["predicted_step_s"] if not r["refused"] else np.nan
            )
        out.append(entry)
    return pd.DataFrame(out)


def _null(runs, df, row) -> float:
    """The null model's error on a row priced as noted (``validate.validation``'s column)."""
    noted = df.set_index("id").null_error_as_noted
    return float(noted.get(row["id"], np.nan))


def summary(table):
    """Per group (the fourth holdout as noted; the earlier splits' FP8 / CP rows as stated, by
    kind of step), the rows priced, median |error|, median signed error, the null model's median
    |error| on the same rows, and the share within 25%."""
    import pandas as pd

    priced = table[table.refused == ""]
    groups = {
        "holdout-4 (MoE, CP, FP8; as noted)": priced[priced.split == SPLIT],
        "holdout-4: MoE rows": priced[(priced.split == SPLIT) & priced.kind.str.contains("MoE")],
        "holdout-4: dense CP rows": priced[(priced.split == SPLIT) & ~priced.kind.str.contains("MoE")],
        "earlier splits: FP8 rows": priced[(priced.split != SPLIT) & priced.kind.str.contains("FP8")],
        "earlier splits: BF16 CP rows": priced[(priced.split != SPLIT) & ~priced.kind.str.contains("FP8")],
    }
    rows = []
    for name, g in groups.items():
        if not len(g):
            continue
        rows.append(
            {
                "rows": name,
                "priced": len(g),
                "median_abs_error": float(g.error.abs().median()),
                "median_signed_error": float(g.error.median()),
                "null_median_abs_error": float(g.null_error.abs().median()),
                "within_25pct": float((g.error.abs() <= 0.25).mean()),
            }
        )
    return pd.DataFrame(rows)


def sensitivity(runs, fitted: float):
    """Median |error| of the fourth holdout (as noted) and of the earlier FP8 rows with each named
    assumption of ``SENSITIVITY`` moved, the others at their defaults."""
    import pandas as pd

    held = [r for r in runs if r.get("split") == SPLIT]
    fp8 = [
        r
        for r in runs
        if r.get("split") != SPLIT and r["layout"].get("dtype", "bf16") in step_model.FP8_DTYPES
    ]
    out = []
    for name, values in SENSITIVITY.items():
        for value in values:
            kw = {validate.FIT_PARAMETER: fitted, name: value}
            held_err = np.array(
                [validate.predict_row(r, price_not_modelled=True, **kw)["error"] for r in held]
            )
            fp8_err = np.array([validate.predict_row(r, **kw)["error"] for r in fp8])
            held_err, fp8_err = held_err[~np.isnan(held_err)], fp8_err[~np.isnan(fp8_err)]
            out.append(
                {
                    "assumption": name,
                    "value": value,
                    "holdout4_median_abs_error": float(np.median(np.abs(held_err)))
                    if len(held_err)
                    else None,
                    "holdout4_median_signed_error": float(np.median(held_err)) if len(held_err) else None,
                    "earlier_fp8_median_abs_error": float(np.median(np.abs(fp8_err)))
                    if len(fp8_err)
                    else None,
                    "earlier_fp8_median_signed_error": float(np.median(fp8_err)) if len(fp8_err) else None,
                }
            )
    return pd.DataFrame(out)


def text(summary_table, table) -> str:
    """What the rows show, computed from the tables: how far the model misses on each group,
    against the null model, and which term dominates the worst misses."""
    if not len(summary_table):
        return "No MoE, context-parallel or FP8 row is priced."
    s = summary_table.set_index("rows")
    parts = []
    for name, r in s.iterrows():
        verdict = "better than" if r.median_abs_error < r.null_median_abs_error else "no better than"
        parts.append(
            f"{name}: {int(r.priced)} rows, median |error| {r.median_abs_error:.1%} "
            f"({r.median_signed_error:+.1%} signed), {verdict} the null model's {r.null_median_abs_error:.1%}"
        )
    priced = table[table.refused == ""]
    worst = priced.reindex(priced.error.abs().sort_values(ascending=False).index).head(3)
    share_cols = [c for c in priced.columns if c.endswith("_share")]
    causes = []
    for _, w in worst.iterrows():
        col = max(share_cols, key=lambda c: w[c])
        causes.append(f"{w.id} ({w.error:+.0%}; {col.removesuffix('_share')} {w[col]:.0%} of its step)")
    refused = table[table.refused != ""]
    return (
        "; ".join(parts)
        + ". The largest misses: "
        + ", ".join(causes)
        + "."
        + (f" {len(refused)} rows are refused (reasons in the table)." if len(refused) else "")
    )
