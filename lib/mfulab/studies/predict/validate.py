"""The predictor against published runs (``studies/predict/published_runs.yaml``): each row's
prediction and error, the one free parameter fitted once on a stated subset, and the
leave-one-out error of the rows it was fitted on.

Error convention: predicted over published step time, minus 1 (positive: the predictor is
slower than the run). A row that publishes per-GPU TFLOP/s is compared through the step time
it implies: F / (X · n_devices), F counted in the row's own convention."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ... import flops, predict
from ...config import ParameterError, TransformerConfig

FIT_PARAMETER = "matmul_efficiency"  # the one free parameter (predict_rates.Assumptions)
LAYOUT_KEYS = (
    "n_devices",
    "tp",
    "pp",
    "vpp",
    "micro_batch",
    "global_batch",
    "recompute",
    "sequence_parallel",
)
CONVENTIONS = {"megatron-full": ("megatron", "full"), "palm": ("palm", "none")}


def load_runs(path) -> list[dict]:
    """The rows of the published-runs file, each checked for a citation, a device, a model,
    a layout and one published figure (``step_s`` or ``tflops_per_gpu`` with a convention)."""
    import yaml

    from ...runner import repo_root

    path = Path(path)
    path = path if path.is_absolute() else repo_root() / path
    if not path.exists():
        raise ParameterError(f"published runs file {path} does not exist")
    rows = (yaml.safe_load(path.read_text()) or {}).get("runs") or []
    for row in rows:
        missing = [
            k
            for k in ("id", "source", "citation", "device", "model", "layout", "published")
            if not row.get(k)
        ]
        if missing:
            raise ParameterError(f"{path.name}: row {row.get('id', '?')} lacks {', '.join(missing)}")
        pub = row["published"]
        if "step_s" not in pub and not ("tflops_per_gpu" in pub and pub.get("convention") in CONVENTIONS):
            raise ParameterError(
                f"{path.name}: row {row['id']} publishes neither step_s nor tflops_per_gpu with a convention"
            )
    return rows


def interleave_depth(n_layers: int, pp: int, m: int, *, rule: str = "deepest") -> int:
    """An unstated interleaving depth by a stated rule: ``deepest`` (one layer per virtual
    stage, as deep as the layers allow) or ``smallest`` (the least v > 1); v must split the
    layers into pp·v chunks and Megatron needs m a multiple of pp. 1 if none is legal."""
    legal = [v for v in range(2, n_layers + 1) if n_layers % (pp * v) == 0 and m % pp == 0]
    if not legal:
        return 1
    return max(legal) if rule == "deepest" else min(legal)


def row_inputs(row: dict, *, interleave_rule: str = "deepest") -> dict:
    """``predict.step_time`` arguments of a row: its stated layout, then the stated rules for
    what it leaves out (``unstated``) and its stated assumptions."""
    model = dict(row["model"])
    model.setdefault("name", row["id"])
    cfg = TransformerConfig(**model)
    layout = {**row["layout"]}
    unstated = dict(row.get("unstated") or {})
    kw = {**{k: v for k, v in unstated.items() if k != "vpp"}, **layout}
    kw.setdefault("micro_batch", 1)
    if "vpp" not in layout:
        vpp = unstated.get("vpp", 1)
        if vpp == "interleaved":
            dp = kw["n_devices"] // (kw["tp"] * kw["pp"])
            m = kw["global_batch"] // (dp * kw["micro_batch"])
            stage_layers = -(-cfg.n_layers // kw["pp"])
            vpp = interleave_depth(stage_layers * kw["pp"], kw["pp"], m, rule=interleave_rule)
        kw["vpp"] = vpp
    return {"cfg": cfg, "device": row["device"], **kw, **(row.get("stated_assumptions") or {})}


def fitted_on(row: dict, fit_sources) -> bool:
    """A row is in the fitted subset when its source is listed and it states every input."""
    return row["source"] in fit_sources and not row.get("unstated")


def predict_row(row: dict, *, interleave_rule: str = "deepest", **assumptions) -> dict:
    """One row's prediction and its error against the published figure (module docstring)."""
    inputs = row_inputs(row, interleave_rule=interleave_rule)
    cfg = inputs.pop("cfg")
    out = predict.step_time(cfg, **inputs, **assumptions)
    pub = row["published"]
    tokens = inputs["global_batch"] * cfg.seq_len
    if "step_s" in pub:
        published_step_s, figure = pub["step_s"], f"{pub['step_s']} s"
    else:
        convention, policy = CONVENTIONS[pub["convention"]]
        flops_per_step = flops.flops_per_token(cfg, convention=convention, recompute=policy) * tokens
        published_step_s = flops_per_step / (pub["tflops_per_gpu"] * 1e12 * inputs["n_devices"])
        figure = f"{pub['tflops_per_gpu']} TFLOP/s ({pub['convention']})"
    return {
        "id": row["id"],
        "source": row["source"],
        "published": figure,
        "published_step_s": published_step_s,
        "predicted_step_s": out["step_s"],
        "error": out["step_s"] / published_step_s - 1,
        "vpp": inputs["vpp"],
        "micro_batch": inputs["micro_batch"],
        "unstated": ", ".join(f"{k}={v}" for k, v in (row.get("unstated") or {}).items()) or "—",
        "fits_memory": out["fits"],
        "memory_gib": out["memory_gib"],
        "mfu_palm": out["mfu_palm"],
        **{k: out[k] for k in predict.TERMS},
    }


def table(rows, **assumptions):
    import pandas as pd

    return pd.DataFrame([predict_row(r, **assumptions) for r in rows])


def grid(fit_grid) -> np.ndarray:
    lo, hi, step = fit_grid
    return np.round(np.arange(lo, hi + step / 2, step), 6)


def fit(rows, *, fit_grid) -> float:
    """The value of :data:`FIT_PARAMETER` on ``fit_grid`` with the smallest median |error| over
    ``rows`` (ties: the smaller largest |error|)."""
    if not rows:
        raise ParameterError("no published row is in the fit subset: check fit_sources")
    best = None
    for value in grid(fit_grid):
        errors = np.abs([predict_row(r, **{FIT_PARAMETER: float(value)})["error"] for r in rows])
        key = (float(np.median(errors)), float(errors.max()))
        if best is None or key < best[0]:
            best = (key, float(value))
    return best[1]


def validation(runs, *, fit_sources, fit_grid) -> dict:
    """Fit once on the rows :func:`fitted_on` selects; every row's prediction at the fitted
    value and at the datasheet-only default; leave-one-out for the fitted rows (refitted
    without the row, then predicted)."""
    from ...predict_rates import Assumptions

    subset = [r for r in runs if fitted_on(r, fit_sources)]
    fitted = fit(subset, fit_grid=fit_grid)
    df = table(runs, **{FIT_PARAMETER: fitted})
    df["fit_subset"] = [fitted_on(r, fit_sources) for r in runs]
    default = getattr(Assumptions(), FIT_PARAMETER)
    df["error_at_default"] = table(runs, **{FIT_PARAMETER: default}).error
    loo = []
    for r in runs:
        if not fitted_on(r, fit_sources):
            loo.append(np.nan)
            continue
        value = fit([s for s in subset if s is not r], fit_grid=fit_grid)
        loo.append(predict_row(r, **{FIT_PARAMETER: value})["error"])
    df["loo_error"] = loo
    return {"fitted": fitted, "default": default, "table": df, "n_fit": len(subset)}


def summary(df, *, row_goal: float, median_goal: float) -> dict:
    """The error summary, computed from the table (never stored by hand): all rows, the rows
    outside the fitted subset, the fitted rows' leave-one-out errors, and the same goal at the
    datasheet-only default."""
    err = df.error.abs()
    loo = df.loo_error.abs()[df.fit_subset]
    default = df.error_at_default.abs()
    outside = err[~df.fit_subset]
    return {
        "published_median_abs_error": float(err.median()),
        "published_max_abs_error": float(err.max()),
        "published_rows_within_goal": float((err <= row_goal).mean()),
        "out_of_subset_median_abs_error": float(outside.median()) if len(outside) else None,
        "out_of_subset_max_abs_error": float(outside.max()) if len(outside) else None,
        "fit_subset_loo_median_abs_error": float(loo.median()) if len(loo) else None,
        "fit_subset_loo_max_abs_error": float(loo.max()) if len(loo) else None,
        "default_median_abs_error": float(default.median()),
        "default_max_abs_error": float(default.max()),
        "goal_met": bool((err <= row_goal).all() and err.median() <= median_goal),
        "goal_met_at_default": bool((default <= row_goal).all() and default.median() <= median_goal),
    }
