"""The predictor against published runs (``studies/predict/published_runs.yaml``), validated the
way a performance model should be: the rows split by source into a fit set, a development set
(seen while the model was built), a test set (first evaluated at the model's freeze) and two
holdouts collected apart (``holdout_files``, each first evaluated at its own freeze), fixed in
the YAML before anything is fitted; one free parameter fitted on the fit set only; every
row predicted at it; beside it a null model fitted the same way; leave-one-out on the fit rows,
leave-one-source-out over every source, and the history of the test error per model revision
(``studies/predict/validation_history.yaml``).

Error convention: predicted over published step time, minus 1 (positive: the predictor is
slower than the run). A row that publishes per-GPU TFLOP/s is compared through the step time
it implies, F / (X · n_devices) with F counted in the row's own convention; a row that
publishes tokens per second per GPU through B·s / (tokens/s · n_devices). A row whose layout
the predictor refuses (context parallelism, FP8 GEMMs, ...) is kept, with the reason, and
counted in no error."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mfulab.analytic import flops
from mfulab.analytic import step as step_model
from mfulab.analytic.config import TransformerConfig
from mfulab.errors import ParameterError
from mfulab.studykit.step_error import HELD_OUT, HISTORY_FILE, read_history  # noqa: F401 (re-exported)

FIT_PARAMETER = "matmul_share_of_mamf"  # the one free parameter (rates.Assumptions)
SPLITS = ("fit", "development", "test", "holdout", "holdout-2", "holdout-3", "holdout-4")
GRAD_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}  # a stated grad_reduce_dtype, as grad_bytes_per_elem
# STATED RULE (holdout-4, fixed before any of its rows was priced): a SwiGLU model whose norm,
# biases and embeddings the row does not name is the Llama shape (every model of that set is)
LLAMA_SHAPE = {"norm": "rmsnorm", "bias": False, "tied_embeddings": False, "learned_positions": False}
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
# the FLOP count a published TFLOP/s figure was computed with: Narayanan et al. 2021 Eq. 3
# (counts the recomputed forward), Megatron-Core's model FLOPs (the same without it), PaLM's
CONVENTIONS = {
    "megatron-full": ("megatron", "full"),
    "megatron-model": ("megatron", "none"),
    "palm": ("palm", "none"),
}


def _repo_path(path) -> Path:
    from mfulab.paths import repo_root

    path = Path(path)
    return path if path.is_absolute() else repo_root() / path


def load_file(path) -> dict:
    """The published-runs file: its ``split`` (source → fit | development | test, and the model
    commit the test rows were first evaluated at) and its ``runs``, each checked for a
    citation, a device, a model, a layout, one published figure and a source the split names;
    with ``holdout_files``, each file's rows too (each its own split, ``holdout``,
    ``holdout-2`` or ``holdout-3``, with ``<split>_frozen_at``, the commit its rows were first
    evaluated at)."""
    import yaml

    path = _repo_path(path)
    if not path.exists():
        raise ParameterError(f"published runs file {path} does not exist")
    data = yaml.safe_load(path.read_text()) or {}
    split = data.get("split") or {}
    sources = {s: name for name in SPLITS for s in (split.get(name) or [])}
    rows = data.get("runs") or []
    for row in rows:
        missing = [
            k
            for k in ("id", "source", "citation", "device", "model", "layout", "published")
            if not row.get(k)
        ]
        if missing:
            raise ParameterError(f"{path.name}: row {row.get('id', '?')} lacks {', '.join(missing)}")
        pub = row["published"]
        if not (
            "step_s" in pub
            or "tokens_per_s_per_gpu" in pub
            or ("tflops_per_gpu" in pub and pub.get("convention") in CONVENTIONS)
        ):
            raise ParameterError(
                f"{path.name}: row {row['id']} publishes no step_s, tokens_per_s_per_gpu or "
                "tflops_per_gpu with a convention"
            )
        if split and row["source"] not in sources:
            raise ParameterError(f"{path.name}: row {row['id']}'s source {row['source']!r} is in no split")
        row["split"] = sources.get(row["source"], "development")
    for name in data.get("holdout_files") or []:  # collected apart, first evaluated at <split>_frozen_at
        held = load_file(path.parent / name)
        if set(held["sources"]) & set(sources):
            raise ParameterError(f"{name}: a holdout source is also in {path.name} or an earlier holdout")
        if set(held["split"]) & set(split):
            taken = sorted(set(held["split"]) & set(split))
            raise ParameterError(f"{name}: its split names {taken} are taken")
        rows, sources = [*rows, *held["runs"]], {**sources, **held["sources"]}
        split = {**split, **held["split"]}
    return {"split": split, "runs": rows, "sources": sources, "per_term": data.get("per_term")}


def load_runs(path) -> list[dict]:
    """The rows of the published-runs file (:func:`load_file`)."""
    return load_file(path)["runs"]


def interleave_depth(n_layers: int, pp: int, m: int, *, rule: str = "deepest") -> int:
    """An unstated interleaving depth by a stated rule: ``deepest`` (one layer per virtual
    stage, as deep as the layers allow) or ``smallest`` (the least v > 1); v must split the
    layers into pp·v chunks and Megatron needs m a multiple of pp. 1 if none is legal."""
    legal = [v for v in range(2, n_layers + 1) if n_layers % (pp * v) == 0 and m % pp == 0]
    if not legal:
        return 1
    return max(legal) if rule == "deepest" else min(legal)


def row_inputs(row: dict, *, interleave_rule: str = "deepest") -> dict:
    """``step.step_time`` arguments of a row: its stated layout, then the stated rules for
    what it leaves out (``unstated``) and its stated assumptions."""
    model = dict(row["model"])
    model.setdefault("name", row["id"])
    if isinstance(model.get("windows"), dict):  # {window, layers: "alternating: ..."}
        model["windows"] = _layer_windows(model["windows"], model["n_layers"])
    if model.get("mlp") == "swiglu" and "norm" not in model:  # STATED RULE: a named SwiGLU model
        model.update(LLAMA_SHAPE)
    cfg = TransformerConfig(**model)
    layout = {**row["layout"]}
    unstated = dict(row.get("unstated") or {})
    if layout.get("vpp") == "interleaved":  # interleaving named without a depth
        unstated["vpp"] = layout.pop("vpp")
    kw = {**{k: v for k, v in unstated.items() if k != "vpp"}, **layout}
    kw.setdefault("micro_batch", 1)
    if kw.get("dtype") in step_model.FP8_DTYPES:  # STATED RULE: an FP8 row naming no recipe scales
        kw.setdefault("fp8_recipe", "mxfp8" if kw["dtype"] == "mxfp8" else "current")  # per tensor, now
    if "vpp" not in layout:
        vpp = unstated.get("vpp", 1)
        if vpp == "interleaved":
            dp = kw["n_devices"] // (kw["tp"] * kw["pp"] * kw.get("context_parallel", 1))
            m = kw["global_batch"] // (dp * kw["micro_batch"])
            stage_layers = -(-cfg.n_layers // kw["pp"])
            vpp = interleave_depth(stage_layers * kw["pp"], kw["pp"], m, rule=interleave_rule)
        kw["vpp"] = vpp
    stated = dict(row.get("stated_assumptions") or {})
    if "grad_reduce_dtype" in stated:  # the width gradients are reduced in
        width = stated.pop("grad_reduce_dtype")
        if width not in GRAD_BYTES:
            raise ParameterError(f"row {row['id']}: grad_reduce_dtype {width!r} not in {sorted(GRAD_BYTES)}")
        stated["grad_bytes_per_elem"] = GRAD_BYTES[width]
    return {"cfg": cfg, "device": row["device"], **kw, **stated}


def _layer_windows(spec: dict, n_layers: int) -> list:
    """Per-layer windows from a row's ``{window, layers}``: "alternating" puts the window on
    every other layer, from the first (GPT-OSS's ``layer_types``); anything else is refused."""
    if not str(spec.get("layers", "")).startswith("alternating"):
        raise ParameterError(f"window layout {spec.get('layers')!r} is not one the loader reads")
    return [spec["window"] if i % 2 == 0 else None for i in range(n_layers)]


def fitted_on(row: dict, fit_sources) -> bool:
    """A row is in the fitted subset when its source is listed and it states every input."""
    return row["source"] in fit_sources and not row.get("unstated")


def published_step_s(row: dict, cfg: TransformerConfig, inputs: dict) -> tuple[float, str]:
    """The step time a row's published figure implies, and the figure as printed."""
    pub = row["published"]
    tokens = inputs["global_batch"] * cfg.seq_len
    if "step_s" in pub:
        return pub["step_s"], f"{pub['step_s']} s"
    if "tokens_per_s_per_gpu" in pub:
        tps = pub["tokens_per_s_per_gpu"]
        return tokens / (tps * inputs["n_devices"]), f"{tps:,} tokens/s per GPU"
    convention, policy = CONVENTIONS[pub["convention"]]
    flops_per_step = flops.flops_per_token(cfg, convention=convention, recompute=policy) * tokens
    return flops_per_step / (pub["tflops_per_gpu"] * 1e12 * inputs["n_devices"]), (
        f"{pub['tflops_per_gpu']} TFLOP/s ({pub['convention']})"
    )


def predict_row(
    row: dict, *, interleave_rule: str = "deepest", price_not_modelled: bool = False, **assumptions
) -> dict:
    """One row's prediction and its error against the published figure (module docstring); a
    layout the predictor refuses comes back with ``refused`` set and no error. A row whose file
    names a feature the model lacks (``not_modelled``) is refused too, unless
    ``price_not_modelled``: then it is priced as its note says (a reading scored apart)."""
    inputs = row_inputs(row, interleave_rule=interleave_rule)
    cfg = inputs.pop("cfg")
    pub_s, figure = published_step_s(row, cfg, inputs)
    from mfulab.analytic.devices import peak_flops_per_s

    tokens = inputs["global_batch"] * cfg.seq_len
    try:
        peak_total = inputs["n_devices"] * peak_flops_per_s(row["device"], "bf16")
    except ParameterError:  # a device devices.yaml lacks: the row is refused below
        peak_total = np.nan
    if price_not_modelled and cfg.n_layers % inputs["pp"] and "uneven_end_stages" not in inputs:
        inputs["uneven_end_stages"] = True  # priced as noted: the end stages hold what is left
    base = {
        "model_flops_per_step": flops.flops_per_token(cfg, convention="palm") * tokens,
        "peak_flops_total": peak_total,
        "id": row["id"],
        "source": row["source"],
        "split": row.get("split", "development"),
        "device": row["device"],
        "dtype": inputs.get("dtype", "bf16"),  # the GEMMs' precision: an FP8 row's MFU has two peaks
        "sweep": row.get("sweep", ""),
        "published": figure,
        "published_step_s": pub_s,
        "vpp": inputs["vpp"],
        "micro_batch": inputs["micro_batch"],
        "unstated": ", ".join(f"{k}={v}" for k, v in (row.get("unstated") or {}).items()) or "—",
    }
    try:
        if row.get("not_modelled") and not price_not_modelled:  # a feature the predictor lacks
            raise ParameterError(f"not modelled: {row['not_modelled']}")
        out = step_model.step_time(cfg, **inputs, **assumptions)
    except ParameterError as err:
        return {**base, "refused": str(err), "predicted_step_s": np.nan, "error": np.nan}
    return {
        **base,
        "refused": "",
        "predicted_step_s": out["step_s"],
        "error": out["step_s"] / pub_s - 1,
        "fits_memory": out["fits"],
        "memory_gib": out["memory_gib"],
        "mfu_palm": out["mfu_palm"],
        "framework": out["framework"],
        **{k: out[k] for k in step_model.TERMS},
    }


def table(rows, **assumptions):
    import pandas as pd

    return pd.DataFrame([predict_row(r, **assumptions) for r in rows])


def grid(fit_grid) -> np.ndarray:
    lo, hi, step = fit_grid
    return np.round(np.arange(lo, hi + step / 2, step), 6)


def _best_on_grid(values, loss) -> float:
    best = None
    for value in values:
        key = loss(float(value))
        if best is None or key < best[0]:
            best = (key, float(value))
    return best[1]


def fit_value(loss, fit_grid) -> float:
    """The value on ``fit_grid`` that minimises ``loss`` (a tuple compared in order), searched
    coarse to fine: every tenth grid point, then every point within a coarse step of the best."""
    values = grid(fit_grid)
    coarse = _best_on_grid(values[::10], loss)
    step = fit_grid[2] * 10
    return _best_on_grid(values[np.abs(values - coarse) <= step + 1e-9], loss)


def row_errors():
    """``error(row, value)``: a row's error at one value of :data:`FIT_PARAMETER`, each pair
    priced once. The refits (leave one out, leave one source out) search the same grid over
    nearly the same rows; sharing one of these between them prices each pair once instead of
    once per refit (the step model is deterministic, so the fits are unchanged)."""
    seen: dict = {}

    def error(row: dict, value: float) -> float:
        key = (id(row), value)
        if key not in seen:
            seen[key] = predict_row(row, **{FIT_PARAMETER: value})["error"]
        return seen[key]

    return error


def fit(rows, *, fit_grid, error=None) -> float:
    """The value of :data:`FIT_PARAMETER` with the smallest median |error| over ``rows`` (ties:
    the smaller largest |error|); refused rows do not count. ``error``: a :func:`row_errors`
    shared between refits over the same rows."""
    if not rows:
        raise ParameterError("no published row is in the fit subset: check the file's split")
    error = error or row_errors()

    def loss(value):
        errors = np.abs([error(r, value) for r in rows])
        errors = errors[~np.isnan(errors)]
        return (float(np.median(errors)), float(errors.max()))

    return fit_value(loss, fit_grid)


# ---------------------------------------------------------------------------- the null model
def hardware_flops_per_step(row: dict) -> float:
    """The FLOPs a row's step runs on its devices: PaLM's model FLOPs with the recomputed
    forward counted (the HFU numerator)."""
    inputs = row_inputs(row)
    cfg = inputs["cfg"]
    per_token = flops.flops_per_token(cfg, convention="palm", recompute=inputs.get("recompute", "none"))
    return per_token * inputs["global_batch"] * cfg.seq_len


def null_predictions(rows, utilisation: float) -> np.ndarray:
    """The constant-utilisation null model: every step takes its hardware FLOPs at
    ``utilisation`` of the devices' dense peak; nothing about layout, links or kernels."""
    from mfulab.analytic.devices import peak_flops_per_s

    out = []
    for row in rows:
        inputs = row_inputs(row)
        dtype = inputs.get("dtype", "bf16")
        try:  # an FP8 step's null runs at the BF16 peak too (its MFU convention)
            peak = peak_flops_per_s(row["device"], "bf16" if dtype in step_model.FP8_DTYPES else dtype)
        except ParameterError:  # no datasheet entry for the device
            out.append(np.nan)
            continue
        out.append(hardware_flops_per_step(row) / (inputs["n_devices"] * peak * utilisation))
    return np.array(out)


def fit_null(rows, published: np.ndarray, *, fit_grid=(0.2, 0.8, 0.001)) -> float:
    """The null model's utilisation, fitted the way the predictor's parameter is: the smallest
    median |error| over the fit rows."""

    def loss(value):
        errors = np.abs(null_predictions(rows, value) / published - 1)
        return (float(np.median(errors)), float(errors.max()))

    return fit_value(loss, fit_grid)


# ---------------------------------------------------------------------------- the validation
def validation(runs, *, fit_sources, fit_grid) -> dict:
    """Fit once on the rows :func:`fitted_on` selects; every row's prediction at the fitted
    value and at the default; leave-one-out for the fitted rows (refitted without the row);
    the null model fitted on the same rows and applied to every row."""
    from mfulab.analytic.rates import Assumptions

    subset = [r for r in runs if fitted_on(r, fit_sources)]
    fitted = fit(subset, fit_grid=fit_grid)
    df = table(runs, **{FIT_PARAMETER: fitted})
    df["fit_subset"] = [fitted_on(r, fit_sources) for r in runs]
    default = getattr(Assumptions(), FIT_PARAMETER)
    df["error_at_default"] = table(runs, **{FIT_PARAMETER: default}).error
    loo, error = [], row_errors()
    for r in runs:
        if not fitted_on(r, fit_sources):
            loo.append(np.nan)
            continue
        value = fit([s for s in subset if s is not r], fit_grid=fit_grid, error=error)
        loo.append(error(r, value))
    df["loo_error"] = loo
    fit_published = df.published_step_s[df.fit_subset].to_numpy()
    null_u = fit_null(subset, fit_published)
    df["null_error"] = null_predictions(runs, null_u) / df.published_step_s.to_numpy() - 1
    # rows with a feature the model lacks, priced as their notes say (scored apart, never in the goals)
    noted = [
        predict_row(r, price_not_modelled=True, **{FIT_PARAMETER: fitted})["error"]
        if r.get("not_modelled")
        else np.nan
        for r in runs
    ]
    df["error_as_noted"] = noted
    df["null_error_as_noted"] = df.null_error.where(df.error_as_noted.notna())
    df.loc[df.refused != "", "null_error"] = np.nan  # compared on the rows the predictor prices
    return {
        "fitted": fitted,
        "default": default,
        "table": df,
        "n_fit": len(subset),
        "null_utilisation": null_u,
    }


def summary(df, *, row_goal: float, median_goal: float) -> dict:
    """The error summary, computed from the table (never stored by hand): the priced rows, the
    rows outside the fitted subset, the fitted rows' leave-one-out errors, and the same goal
    at the default."""
    priced = df[df.refused == ""]
    err = priced.error.abs()
    loo = priced.loo_error.abs()[priced.fit_subset]
    default = priced.error_at_default.abs()
    outside = err[~priced.fit_subset]
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
