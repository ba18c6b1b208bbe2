# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python (mfulab)
#     language: python
#     name: mfulab
# ---

# %% [markdown]
# # 10 · Calibrate here, predict there: step time and MFU against published runs
#
# Each chapter so far ended with an at-scale model of its own. A reader's real question joins
# them: *for my model on my cluster with this layout, what step time and MFU should I expect,
# and where will the time go?* `mfulab.predict.step_time` answers it from the pieces the
# course has checked one by one: every GEMM of a layer at a rate R∞ with a launch cost t₀ under
# a roofline cap, attention (unfused, or a flash kernel), the memory-bound ops at the memory
# bandwidth, recomputation, tensor-parallel collectives, the pipeline bubble and messages, the
# data-parallel reduction minus what backward hides, the optimizer and the data wait.
#
# Its machine figures come from a device's datasheet (`devices.yaml`) — or, with
# `calibration=results/<machine>/calibration`, from what this project measured on the machine.
# Every figure it assumes is a field of `predict_rates.Assumptions` with its source.
#
# This chapter checks it twice: against **published large-scale runs** (their configuration
# and throughput as the papers state them, `studies/predict/published_runs.yaml`), and against
# **a training step measured here**, operator class by operator class, with the predictor fed
# by this machine's calibration. Then it applies it to the articles' worked examples (B15,
# A17/A19).

# %% tags=["parameters"]
params = {}  # the profile's values (papermill injects them); empty: the defaults, the laptop profile
out_dir = ""  # set by the runner; empty: scratch/predict
from_dir = ""  # analyse measurements from this folder instead of measuring

# %%
from IPython.display import Markdown, display

from mfulab import plots, results
from mfulab.notebook import setup, stability_note
from mfulab.studies.predict import analysis, articles, calibrated, figures, validate

out, p, records = setup("predict", params, out_dir=out_dir, from_dir=from_dir)
valid = analysis.validation(records, p)
fitted = {validate.FIT_PARAMETER: valid["fitted"]}
print(f"{records['device_name']} ({records['device']}); {len(records['published_runs'])} published runs")

# %% [markdown]
# ## 1 · One free parameter, fitted once
#
# Published runs never state their kernels' efficiency. The predictor has one free parameter,
# `matmul_efficiency` (R∞ over the datasheet peak), and it is set **once** for every row: fitted
# on one stated subset (`fit_sources`: the Korthikanti et al. rows that state every input; a row
# with an unstated input is never fitted on), the value that minimises the median |error| there.
# Every other row is predicted with it. The datasheet-only default, 0.8, is the best single GEMM
# stas00's MAMF finder measures (`predict_rates.Assumptions`); a training step's GEMMs are not
# all the best shape.

# %%
display(
    Markdown(
        f"Fitted `matmul_efficiency` = **{valid['fitted']:.4f}** on {valid['n_fit']} rows "
        f"({', '.join(p.fit_sources)}); datasheet-only default {valid['default']}."
    )
)

# %% [markdown]
# ## 2 · Every published row: prediction, error, leave-one-out
#
# Error = predicted ÷ published step time − 1 (positive: the predictor is slower than the run).
# A row that publishes per-GPU TFLOP/s is compared through the step time it implies in its own
# FLOPs convention (Narayanan's Eq. 3 counts the recomputed forward; Llama 3 uses PaLM's model
# FLOPs). `error_at_default` is the same row at the datasheet-only default; `loo_error` (rows of
# the fitted subset) refits without the row before predicting it. `unstated` lists the inputs
# the source leaves out and the rule that set them.

# %%
df = valid["table"]
results.save_table(out, "validation", df)
shown = df[
    ["id", "published", "published_step_s", "predicted_step_s", "error", "error_at_default", "loo_error"]
    + ["vpp", "micro_batch", "unstated", "fits_memory", "memory_gib"]
]
display(
    shown.style.format(
        {
            "published_step_s": "{:.2f}",
            "predicted_step_s": "{:.2f}",
            "error": "{:+.1%}",
            "error_at_default": "{:+.1%}",
            "loo_error": "{:+.1%}",
            "memory_gib": "{:.0f}",
        },
        na_rep="—",
    ).hide(axis="index")
)

# %%
short = df[df.fits_memory == False]  # noqa: E712  (None: no memory size known)
if len(short):
    display(
        Markdown(
            f"`memory.memory_per_device` finds {', '.join(short.id)} short of memory "
            f"({', '.join(f'{g:.0f}' for g in short.memory_gib)} GiB per device): these runs did fit, so "
            "the memory model overstates them (it keeps L layers' activations in flight under 1F1B and "
            "sizes the MLP's by its 4h GeLU rule)."
        )
    )

# %%
summary = validate.summary(df, row_goal=p.row_error_goal, median_goal=p.median_error_goal)
sens = analysis.sensitivity(records, p, valid["fitted"])
display(Markdown(analysis.summary_text(summary, p, sens)))
plots.save_figure(figures.validation(df, p.row_error_goal), out, "validation")

# %% [markdown]
# Where a row misses (or, when none does, the three largest errors): the compute terms are
# shared by every row and fitted on one subset, so a miss most likely sits in a row's largest
# non-compute term, or in what the row's device does differently from the fitted rows' A100s.

# %%
miss = analysis.misses(df, p.row_error_goal)
results.save_table(out, "misses", miss)
display(miss.style.format({"error": "{:+.1%}"}).hide(axis="index"))

# %% [markdown]
# **Another device.** The efficiency is fitted on A100 rows. On a device whose best GEMM reaches
# a different share of its peak (MAMF: 0.80 on H100 against 0.87 on A100), the same training
# share of the best GEMM gives the fitted efficiency scaled by that ratio:

# %%
transfer = analysis.device_transfer(records, p, valid["fitted"])
results.save_table(out, "device_transfer", transfer)
display(
    transfer.style.format(
        {"efficiency": "{:.3f}", "error_fitted": "{:+.1%}", "error_mamf_scaled": "{:+.1%}"}
    ).hide(axis="index")
)

# %% [markdown]
# **Unstated interleaving depth.** Narayanan et al. (§5.1) and Llama 3 say they interleave the
# pipeline but not how deep. The table above uses one layer per virtual stage (the deepest the
# layers allow); here is the smallest depth beside it. The rule was chosen after seeing both
# on these rows: on the interleaving depth they are no test of the predictor. (With uneven end
# stages, Llama 3's smaller depths cannot split its 7-layer end stages evenly; the table takes
# the 128 slots as if they could.)

# %%
inter = analysis.interleave_sensitivity(records, p, valid["fitted"])
results.save_table(out, "interleave_sensitivity", inter)
display(inter.style.format("{:+.1%}", subset=["error_deepest", "error_smallest"]).hide(axis="index"))

# %% [markdown]
# ## 3 · Where the time goes, row by row
#
# The predicted step of each published run, term by term, as shares of its step (the step time
# is beside each row's name). Full recomputation shows as its own band (one more forward of
# every layer: a third more than forward + backward); pipelines carry their bubble; the rows
# with data parallelism carry the gradient reduction Megatron 2021–22 ran after the backward.

# %%
plots.save_figure(figures.breakdown(df, title="predicted step, share per term"), out, "breakdown")

# %% [markdown]
# **Sensitivity.** Each assumption the predictor takes from a datasheet or a benchmark moved
# ±25% around its default (the fitted efficiency held; an efficiency stops at 1, and `change`
# shows the move it made): how much the validation depends on it.

# %%
results.save_table(out, "sensitivity", sens)
fmt = {"default": "{:.3g}", "value": "{:.3g}", "change": "{:+.0%}"}
fmt |= {"median_abs_error": "{:.1%}", "max_abs_error": "{:.1%}"}
display(sens.style.format(fmt).hide(axis="index"))

# %% [markdown]
# ## 4 · Calibrate here, predict here
#
# The same predictor, fed by this machine's calibration instead of a datasheet (R∞ and t₀
# fitted to its square matmuls, its copy bandwidth), against one training step measured here
# (median of timed steps; the split by operator class from `torch.profiler`, as in chapter 01).
# Nothing is fitted to the step. The fitted `matmul_efficiency` plays no part here: the
# calibration replaces it.

# %%
check = calibrated.comparison(records, **fitted)
results.save_table(out, "calibrated_check", check)
display(
    check.style.format({"predicted_s": "{:.4f}", "measured_s": "{:.4f}", "error": "{:+.1%}"}).hide(
        axis="index"
    )
)
plots.save_figure(figures.calibrated(check), out, "calibrated")
display(Markdown(analysis.calibrated_text(records, check)))

# %% [markdown]
# ## 5 · The articles' cases
#
# **B15 — the 64 × A100 ladder.** The predictor for the stated cluster and model, with each
# rung's change applied in turn (`articles.B15_CHANGES`). Our reading of what the article leaves
# out is in `articles.B15_CASE`. Two rungs get no change: GPUDirect RDMA would raise the
# inter-node bandwidth, for which the article gives no figure; locked clocks have no term.

# %%
ladder = articles.b15_ladder(**fitted)
results.save_table(out, "b15_ladder", ladder)
b15_sens = articles.b15_sensitivity(**fitted)
results.save_table(out, "b15_sensitivity", b15_sens)
cols = [
    "rung",
    "article_step_s",
    "article_gain_s",
    "predicted_step_s",
    "predicted_gain_s",
    "changed",
    "mfu_palm",
]
fmt = {"article_step_s": "{:.1f}", "article_gain_s": "{:.1f}", "predicted_step_s": "{:.2f}"}
fmt |= {"predicted_gain_s": "{:+.2f}", "mfu_palm": "{:.1%}"}
display(ladder[cols].style.format(fmt, na_rep="—").hide(axis="index"))
display(Markdown(analysis.b15_text(ladder, b15_sens, summary["published_max_abs_error"])))
secs = ["baseline_step_s", "dp_comm_s", "dp_comm_exposed_s"]
display(b15_sens.style.format({**dict.fromkeys(secs, "{:.2f}"), "dp_overlap": "{:.1f}"}).hide(axis="index"))
fig = figures.breakdown(ladder, label_col="rung", title="B15 ladder: predicted step per term", seconds=True)
plots.save_figure(fig, out, "b15_ladder")

# %% [markdown]
# **A17/A19 — 13B on 8 × 910B.** The predictor's step for the stated layout (`articles.A19_CASE`:
# every layer recomputed) with each attention kernel, the MFU it implies, and the MFU the
# article's stated step would mean. The 910B figures are approximate (no vendor datasheet), and
# the fitted A100 matmul efficiency is carried over: a reading, not a measurement.

# %%
a19 = articles.a19_case(**fitted)
results.save_table(out, "a19_case", a19)
cols = [
    "attention",
    "stated_step_s",
    "stated_mfu_palm",
    "predicted_step_s",
    "mfu_palm",
    "hfu_palm",
    "fits_memory",
]
pct = {"stated_mfu_palm": "{:.0%}", "mfu_palm": "{:.1%}", "hfu_palm": "{:.1%}"}
display(
    a19[cols]
    .style.format({"stated_step_s": "{:.1f}", "predicted_step_s": "{:.2f}", **pct})
    .hide(axis="index")
)
display(Markdown(analysis.a19_text(a19)))

# %% [markdown]
# ## 6 · Your own layout
#
# ```sh
# python -m mfulab predict --preset llama2-70b --devices 1024 --device h100-sxm --tp 8 --pp 4 \
#     --global-batch 1024 [--calibration results/<machine>/calibration] [--search]
# ```
#
# prints the breakdown and MFU of one layout; `--search` ranks every layout the planner finds
# (`layouts.candidate_layouts`) by the predictor's step time. It runs at the datasheet-only
# defaults unless told otherwise: `--assume matmul_efficiency=<the value fitted above>` (any
# field of `Assumptions`, repeatable) puts this chapter's fit in. A layout that cannot exist or
# does not fit memory (by `memory.memory_per_device`, which finds the Llama 3 rows above short
# of 80 GB, though they ran), or an unknown device, is refused with the reason.

# %%
headline = analysis.headline_metrics(records, p, valid)
results.publish_claims(out, [], headline)  # no claim rows: the stability note compares the numbers
display(Markdown(stability_note(out)))
