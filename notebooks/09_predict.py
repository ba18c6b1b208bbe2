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
# # 09 · Calibrate here, predict there: step time and MFU against published runs
#
# A reader's real question joins the chapters: *for my model on my cluster with this layout,
# what step time and MFU should I expect, and where will the time go?* The course has one model
# for it, `mfulab.analytic.step.step_time` (chapter 08's planner ranks layouts with the same one). It
# prices every GEMM of a layer at a rate R∞ (a share of the device's best measured GEMM) with a
# launch cost t₀ under a roofline cap, attention (unfused, or a flash kernel), the memory-bound
# ops at the memory bandwidth, recomputation, tensor-parallel collectives (with or without comm
# overlap), the pipeline bubble and messages, the data-parallel collectives the framework issues
# (DDP with or without ZeroRedundancyOptimizer, Megatron, DeepSpeed, FSDP and its hybrid
# sharding: bucket by bucket or unit by unit, each call priced by NCCL's own latency model on the
# group it runs in) minus what compute hides, the optimizer and the data wait. Since the
# revision that froze the fourth holdout it also prices mixture-of-experts layers (grouped expert
# GEMMs, the expert-parallel all-to-alls, the experts' own data-parallel group), latent and
# windowed attention, context parallelism (the ring's K/V exchange against the attention it
# overlaps) and FP8 GEMMs (at the FP8 peak's rate, with each scaling recipe's cast traffic):
# `analytic/step_modern.py`. It refuses, with the reason, what it does not model; a held-out
# file marks the rows whose runs use such a feature, and those are scored apart, priced as
# their notes say (the as-noted tables below), never in the goals.
#
# Its machine figures come from a device's datasheet (`devices.yaml`) — or, with
# `calibration=results/<machine>/calibration`, from what this project measured on the machine.
# Every figure it assumes is a field of `rates.Assumptions` with its source.
#
# This chapter checks it twice: against **published large-scale runs** (their configuration
# and throughput as their sources state them, `studies/predict/published_runs.yaml`), split
# before fitting and tested on rows first evaluated at the model's freeze, and against
# **a training step measured here**, operator class by operator class, with the predictor fed
# by this machine's calibration. Then it applies it to the articles' worked examples (B15,
# A17/A19).

# %% tags=["parameters"]
params = {}  # the profile's values (papermill injects them); empty: the defaults, the laptop profile
out_dir = ""  # set by the runner; empty: scratch/predict
from_dir = ""  # analyse measurements from this folder instead of measuring

# %%
from IPython.display import Markdown, display

from mfulab.studies.predict import (
    ablations,
    analysis,
    case_texts,
    claims,
    domain,
    figures,
    margin_types,
    margins,
    memory_check,
    modern,
    scores,
    uncertainty,
    worked_examples,
)
from mfulab.studykit import plots, verdicts
from mfulab.studykit.notebook import setup, stability_note
from mfulab.studykit.step_error import LAYOUT_MARGIN

out, p, records = setup("predict", params, out_dir=out_dir, from_dir=from_dir)
o = claims.outcome(records, p)  # the fit, every table below and the headline metrics, computed once
o.save_tables(out)
t, m = o.tables, o.metrics
print(f"{records['device_name']} ({records['device']}); {len(records['published_runs'])} published runs")
display(Markdown(margins.may_decide_text(t)))
display(Markdown(domain.domain_text(t)))
domain.domain_table(t)

# %% [markdown]
# ### The model in equations
#
# Per device, for a layout of TP t, PP p, DP d, m micro-batches of b sequences of s tokens, and a
# stage of L/p layers (`analytic/step.py`'s docstring has each term's source):
#
# - **step** = m · t_mb + bubble + pp_p2p + dp_exposed + optimizer + data (Narayanan et al. 2021 §2.2)
# - **t_mb** = Σ over the stage's GEMMs of [t₀ + max(2·M·N·K / R∞, bytes / BW)] (forward and its two
#   backward GEMMs; R∞ = a share of the device's best measured GEMM, t₀ its launch cost: Hockney's
#   r∞–n½ form under a roofline cap) + attention + memory-bound bytes / (η_mem · BW) + recompute + tp_comm
# - **bubble** = (p − 1) · t_mb for 1F1B, ÷ v with v interleaved chunks (`parallel.pipeline_schedule_costs`)
# - **dp_exposed** = Σ over the framework's collectives of [latency(algorithm, ranks, nodes) +
#   bytes / link] (NCCL's latency table), less `dp_overlap` × the compute it can hide under
# - **optimizer** = parameters on this device × `optimizer_bytes_per_param` / (η_mem · BW)
#
# The cell below prices article B's 7B baseline (B15, §6) term by term, so the sum can be
# redone by hand.

# %%
baseline = worked_examples.terms_table(t["b15_ladder"].iloc[0])
display(baseline.style.format({"seconds": "{:.3f}", "share_of_step": "{:.1%}"}).hide(axis="index"))
print(
    f"Σ terms = {baseline.seconds.sum():.3f} s = the predicted step "
    f"{t['b15_ladder'].iloc[0].predicted_step_s:.3f} s (article B: {t['b15_ladder'].iloc[0].article_step_s:.1f} s)"
)

# %% [markdown]
# ## 1 · A split fixed before anything is fitted
#
# The rows of `studies/predict/published_runs.yaml` are split **by source**, in the file, before
# anything is fitted or tested:
#
# - **fit** — the one free parameter, `matmul_share_of_mamf` (a training step's GEMMs at R∞ =
#   that share of the device's MAMF, the best GEMM stas00's finder measures on it), is fitted
#   here and nowhere else: the Korthikanti et al. rows that state every input;
# - **development** — the rows the model was built and revised against (four revisions looked
#   at them): reported, never called out of sample;
# - **test** — FSDP and ZeRO-3 at large data-parallel width, H100 and A100, Megatron-family and
#   torchtitan / llm-foundry / MegaScale runs, tuned and untuned layouts;
# - **holdout** — `studies/predict/published_runs_holdout.yaml`: four more sources
#   (flash-attention's training benchmarks, fms-fsdp, TinyLlama, InternLM), collected after the
#   test table had informed post-freeze revisions, by a separate process that saw neither the
#   model nor a prediction, committed with the model at `holdout_frozen_at` and first evaluated
#   there. Where the test rows stopped being blind, these are the blind check, with one
#   exception: HSDP and DDP + ZeroRedundancyOptimizer were modelled after that first evaluation
#   (revision e7e417d in the history), to price 9 of its rows that had been refused, so those 9
#   rows are adaptive, not blind (no row already priced changed; `uncertainty.MODELLED_AFTER_SEEN`
#   names them, and the "holdouts, never seen" group of the bootstrap leaves them out);
# - **holdout-2** — `studies/predict/published_runs_holdout2.yaml`: three more sources (NVIDIA's
#   DGX Cloud benchmarks of MaxText and NeMo on up to 2,048 H100s, BAAI's FlagPerf Megatron runs on
#   A800 and H100), collected by another separate process after the first holdout had been
#   evaluated, with no model change since, and first evaluated at `holdout-2_frozen_at`;
# - **holdout-3** — `studies/predict/published_runs_holdout3.yaml`: three more sources (NVIDIA's
#   Nemotron-4 340B benchmarks on H100 and GB200, NVIDIA's JAX-Toolbox Pax GPT runs on A100 and
#   H100, MaxText's Llama-2-7B on Google Cloud A3 H100s), collected by a third separate process
#   after the fp32-gradient revision, and first evaluated at `holdout-3_frozen_at`;
# - **holdout-4** — `studies/predict/published_runs_holdout4.yaml`: 25 runs with mixture-of-experts
#   models, context parallelism or FP8 GEMMs (NVIDIA's DGX Cloud benchmarks of Grok-1, DeepSeek-V3,
#   Llama 4 and Llama 3.1; Megatron-Bridge's MoE table; the Megatron-MoE model zoo's Qwen3-235B
#   layouts; Llama 3's 131K-token context-parallel stage; DeepSeek-V3's own report), collected by a
#   fourth separate process before the model could price any of them, and first evaluated at
#   `holdout-4_frozen_at`, the commit that added those terms (§ "MoE, context parallelism and FP8").
#
# What the record shows about the test rows, exactly. A review of the previous revision had
# reported its errors on Narayanan et al.'s Table 2 ZeRO-3 rows and said that H100 and
# Megatron-Core rows missed; the features this revision added (each framework's DP
# collectives, TP comm overlap, R∞ as a share of each device's MAMF) answer that review. The
# rows were collected by a separate process while the model was being written, converted by
# the file's stated rules and checked against their sources; they were added in the commit
# named `frozen_at` below, which also carries two model-side changes made before any of them
# was evaluated (a crash fix for a TP group spanning nodes, and the A100 40GB's MAMF entry).
# No test row's error had been computed before the first entry of the validation history at
# the freeze. The revisions since, logged in the history, were informed by the test table
# (flash attention at each device's published share): from there on the test rows are
# development rows in all but name, and the holdout rows take their place.
#
# Every later change to the step model appends its test error to
# `studies/predict/validation_history.yaml` (§2): a model tuned on its test rows would show
# there as test errors falling revision after revision.

# %%
split = records["published_split"]
display(
    Markdown(
        f"Fitted `matmul_share_of_mamf` = **{m['fitted_matmul_share_of_mamf']:.4f}** on {m['fit_rows']} rows "
        f"({', '.join(analysis.fit_sources(records))}); default {m['default_matmul_share_of_mamf']} "
        "(the MAMF itself). "
        f"Model frozen for the test rows at commit `{split.get('frozen_at')}`, for the holdout rows "
        f"at `{split.get('holdout_frozen_at')}`, for the second holdout at "
        f"`{split.get('holdout-2_frozen_at')}`, for the third at `{split.get('holdout-3_frozen_at')}`, "
        f"for the fourth at `{split.get('holdout-4_frozen_at')}`. "
        "The null model below "
        f"(every step its hardware FLOPs at one constant share of the dense peak, fitted on the same "
        f"rows the same way) has utilisation **{m['null_utilisation']:.3f}**."
    )
)

# %% [markdown]
# ## 2 · The held-out test, beside two baselines
#
# Error = predicted ÷ published step time − 1 (positive: the predictor is slower than the run).
# A row that publishes per-GPU TFLOP/s is compared through the step time it implies in its own
# FLOPs convention, one that publishes tokens/s per GPU through B·s/(tokens/s · devices). The
# fit rows are scored by leave-one-out (refitted without the row; the fit source's two 1T rows,
# which leave an input unstated and so are not fitted on, by their plain error). A row the model
# refuses (a layout it cannot price), or that the file marks as beyond it (MegaScale's
# sliding-window attention), is kept with its reason and scored nowhere. Two baselines stand
# beside the predictor: the null model (hardware FLOPs at one utilisation fitted on the fit rows
# the same way) and an unfitted rule of thumb (every step at 40% MFU). The goals the test set is
# held to: median |error| ≤ 8%, largest ≤ 20%, no source's median signed error beyond ±10%,
# every row within 25%.

# %%
df, splits = t["validation"], t["splits"]
pct = {c: "{:+.1%}" if "signed" in c else "{:.1%}" for c in splits.columns if "error" in c or "within" in c}
pct["closer_than_null"] = "{:.0%}"
display(splits.style.format(pct, na_rep="—").hide(axis="index"))
goals = o.values["test_goals"]
for name in goals:  # test and the four holdouts: each against the same goals
    display(Markdown(analysis.test_text(goals[name], splits, split=name, as_noted=t["as_noted"])))
plots.save_figure(figures.validation(df, 0.25), out, "validation")

# %% [markdown]
# **The course's decisive margins.** Every chapter that decides with this model compares two
# modelled configurations, so it decides on their *ratio*, which cancels what the two share. How
# far a modelled ratio strays depends on what the two differ in, so the margin is measured per
# kind of comparison (`studies/predict/margins.py`), on held-out published pairs of one source,
# device and model in BF16/FP16: **layout** pairs differ only in parallel degrees, DP width or
# micro-batch; **switch** pairs differ in anything else (a recompute policy, a ZeRO stage, an
# overlap switch, a framework, or a switch the files do not record). A chapter's comparison of a
# kind decides only beyond that kind's 90th percentile, taken at the largest value that leaving
# out any one publication gives (`studykit.step_error.LAYOUT_MARGIN`, `SWITCH_MARGIN`, the
# `p90_one_source_out_max` column): the margin is an estimate from a handful of publications, and no
# single one of them may place the line a verdict is decided at. The median and 75th percentile
# show how much a verdict hangs on that choice; `p90_lo`–`p90_hi` is the 90th percentile's 95%
# interval over a bootstrap of sources, and `largest_source` the publication that supplies most
# pairs. Every pair,
# with the two rows and the settings they differ in, is in `tables/margin_pairs.csv`, so the sort
# can be audited. Two limits the chapters inherit: the pool holds no pair that differs only in
# interleaving depth and almost no pure toggle, and no published run on article A's Ascend 910B
# (none is public in a form this course could price), so every 910B verdict in chapters 02–08
# carries GPU-derived margins and a GPU-fitted GEMM share to a card the model was never tested
# on: an extrapolation. The course's rule (`docs/claims.md`) labels every such row *analysis at
# assumed configurations*, and one that decides must keep its answer in each reading of the card
# (`analytic.extrapolated.device_readings`: its SKUs' peaks 295 and 374 TFLOP/s, the GEMMs at 0.6
# and 0.9 of MAMF, HBM at 1.2 TB/s, every collective latency × 0.5 and × 4): since 2026-12-07
# chapter 02's A18 and chapter 08's A10 do, and A17's memory row uses only the article's own 64 GB.
# The second table places both margins among the errors on single rows: a step time against a
# published one carries those larger errors.

# %%
kinds = t["kind_margins"]
shares = ("median", "p75", "p90", "p90_lo", "p90_hi", "p90_one_source_out_min", "p90_one_source_out_max")
display(
    kinds.style.format(
        {c: "{:.1%}" for c in (*shares, "null_median", "null_p90")}
        | {"largest_source_share": "{:.0%}", "model_closer_share": "{:.0%}"}
    ).hide(axis="index")
)
display(Markdown(margins.kind_text({r["kind"]: r for r in kinds.to_dict(orient="records")})))
# the layout pairs by what they change: a layout ranking turns on the first group
display(t["layout_term_margins"].style.format({"p90": "{:.1%}", "null_p90": "{:.1%}"}).hide(axis="index"))
# the switch pairs by type of switch, and both kinds on the holdouts' pairs alone (blind)
types, blind = t["switch_type_margins"], t["blind_margins"]
share = {c: "{:.1%}" for c in ("median", "p90", "null_p90")} | {"largest_source_share": "{:.0%}"}
display(types.style.format(share).hide(axis="index"))
display(blind.style.format({"p90": "{:.1%}", "null_p90": "{:.1%}"}, na_rep="—").hide(axis="index"))
display(Markdown(margin_types.types_text(types, blind)))
margin = t["decisive_margin"]
display(
    margin.style.format(
        {c: "±{:.0%}" for c in ("layout_margin", "switch_margin")}
        | {c: "{:.0%}" for c in ("within_layout_margin", "within_switch_margin")}
        | {"median_abs_error": "{:.1%}", "p90_abs_error": "{:.1%}"}
    ).hide(axis="index")
)
display(Markdown(analysis.margin_history_text(records)))

# %% [markdown]
# **How sure these scores are, and what the margin must cover.** Three readings of the same
# table (`studies/predict/uncertainty.py`), none of which changes the model. First, the medians
# above rest on a handful of sources whose rows share a cluster and a framework, so their errors
# move together: the intervals below draw whole sources with replacement. Second, a chapter that
# prices two layouts with the step model decides on their *ratio*, not on either step time, and
# a ratio cancels what two rows of one source share; the error of a predicted ratio between two
# rows of one source, (1 + eᵢ)/(1 + eⱼ), is what the margin must cover, most of all between
# rows of one model on one device (two layouts, as in a chapter's comparison). Third, the fitted
# share comes from one source's rows, which sit fast of every other source's: refitted the same
# way on every row the model has been revised against and scored on the holdouts, which that
# refit never sees, it shows what the fit's bias costs.

# %%
boot, ratios = t["bootstrap"], t["ratio_errors"]
display(boot.style.format(uncertainty.bootstrap_format(boot), na_rep="—").hide(axis="index"))
display(Markdown(uncertainty.bootstrap_text(boot)))
ratio_fmt = {c: "{:.1%}" for c in ratios.columns if "error" in c}
ratio_fmt |= {c: "{:.0%}" for c in ratios.columns if "share" in c} | {"margin": "±{:.0%}"}
display(ratios.style.format(ratio_fmt).hide(axis="index"))
display(Markdown(uncertainty.ratio_text(ratios)))
display(Markdown(uncertainty.refit_text(o.values["refit_on_seen"], m["fitted_matmul_share_of_mamf"])))

# %% [markdown]
# **Past what the model covers.** A held-out row whose file names a feature the model lacks
# (`not_modelled`: a remat policy between `selective` and `full`, JAX/XLA sharding priced as
# FSDP, overlapped pipeline sends, CUDA graphs) is refused above and scored nowhere. Priced as
# its note says, it shows how far the model carries past what it models; these rows are never
# part of the goals.

# %%
display(t["as_noted"].style.format(pct | {"rows_within_25pct": "{:.0%}"}, na_rep="—").hide(axis="index"))

# %% [markdown]
# ## MoE, context parallelism and FP8
#
# The terms `analytic/step_modern.py` adds, each from its mechanism. A MoE layer runs its
# device's share of the routed rows as one grouped GEMM per projection (n_experts/ep experts,
# each 1/etp wide; a capacity factor pads every expert's buffer) at the same R∞ as a dense GEMM,
# its shared experts split like a dense FFN, the router in BF16, the permutation of tokens to
# expert order and back as memory traffic, and four all-to-alls (dispatch and combine, forward
# and backward) of every routed row, pairwise over the expert-parallel group: NVLink to peers
# in the node and the device's own network port to the others, at the links' datasheet figures
# times `link_efficiency`, like every other collective. Context parallelism gives each rank s/cp
# tokens and 1/cp of the causal attention, and passes K and V around a ring of cp ranks (twice
# the bytes backward, with their gradients), each step hidden under the attention block it
# overlaps. Per micro-batch and device (T = b·s/cp tokens, t = tp, e bytes per element, r routed
# rows per token: top-k, or the padded capacity), one all-to-all moves (T/t)·r·h·e bytes out of
# each device, (ep − 1)/ep of them to peers, in ep − 1 pairwise steps; one ring step moves the
# rank's K and V, b·(s/cp)·(n_kv/t)·(d_qk + d_v)·e bytes (all heads' up-projected K and V under
# MLA), cp − 1 steps forward and twice the bytes backward. FP8 GEMMs run at R∞ times the
# device's dense FP8/BF16 peak ratio, with the casts around every GEMM as memory traffic at
# `step_modern.FP8_CAST_BYTES_PER_ELEM`, counted from
# what each recipe reads and writes. Three assumptions are new, each a named field of
# `rates.Assumptions` at a bound, not a fit: `fp8_matmul_relative_efficiency` 1.0 (FP8 GEMMs
# reach the share of their peak BF16 GEMMs reach of theirs), `ep_a2a_exposed` 1.0 (no
# all-to-all hidden) and `moe_load_imbalance` 1.0 (balanced routing).
#
# What the terms leave out, each a named way to miss: the per-node de-duplication of DeepEP and
# of DeepSeek-V3's node-limited routing (a token crosses the network once per node, not once per
# expert), all-to-all overlap (DualPipe, Megatron-Core's overlapped dispatcher), the lower
# efficiency of grouped GEMMs with few rows per expert, the router's softmax and top-k and
# dropless routing's host sync, rowwise FP8 scaling's slower GEMM kernel (priced as per-tensor
# scaling, by the file's stated rule), the extra passes over partial outputs that merge each ring
# step's softmax (local memory traffic) and the ring's chunked kernels' efficiency, Llama 3's
# all-gather form of context parallelism, FSDP's FP8 all-gather of the weights (torchtitan's
# Float8 with FSDP2 gathers them in 1 byte, not 2), and the NVL72 NVLink domain
# (the GB200 rows are refused for want of its interconnect figure, so the rows left over-represent
# expert parallelism across the network).
#
# The record: blind in its collection, partly unblinded in its modelling. The 25 rows were
# collected by a separate process and committed on their own (commit bbdde34,
# `studies/predict/pending/`) before any code to price them existed. The model code was then
# written by someone who had read the rows' configurations and, in passing, some of their
# published figures (Grok-1's 15.9 s, Llama 3's 380 TFLOP/s, DeepSeek-V3's 1,543 tokens/s per
# GPU), and who had computed no prediction of them; it was fixed at `holdout-4_frozen_at` (§1),
# with the loader's rules (a SwiGLU shape is Llama's, an FP8 row naming no recipe, rowwise
# included, is priced with per-tensor current scaling, uneven stages when priced as noted). The history's entry for it (b8164af, the first of this revision in
# the table below) is that code with only the split's `frozen_at` line filled in, and it records
# this split's as-noted scores (`holdout4_as_noted_median_abs_error`). Every row of the fourth
# holdout names a feature the model lacks (token dropping with padding, DualPipe, CUDA graphs,
# ...), so the strict reading refuses every one; below they are priced as their notes say, at
# the defaults fixed before any of them was priced. The FP8 and context-parallel rows of the
# earlier splits, refused until this revision, are priced as they stand and counted in their
# own splits' scores above; the test rows the model priced before are a line of their own below,
# so the old make-up of the test split stays comparable. The splits of the summary by declared
# all-to-all overlap and the tables after it were read after that first evaluation; none of them
# changed a default. Llama 3's 131K-token row publishes TFLOP/s in PaLM's convention, whose
# attention term is not halved for the causal mask: converted with the halved count instead, its
# error changes sign.

# %%
modern_rows, modern_summary = t["modern_rows"], t["modern_summary"]
pct1 = {c: "{:+.1%}" if "signed" in c or c.startswith("lead") else "{:.1%}" for c in modern_summary.columns}
display(
    modern_summary.style.format(
        {k: v for k, v in pct1.items() if "error" in k}
        | {"closer_than_null": "{:.0%}", "within_25pct": "{:.0%}"}
    ).hide(axis="index")
)
boot = t["modern_bootstrap"]
display(boot.style.format(uncertainty.bootstrap_format(boot), na_rep="—").hide(axis="index"))
display(Markdown(uncertainty.bootstrap_text(boot)))
display(Markdown(modern.text(modern_summary, t["fp8_pairs"], t["modern_ranking"], modern_rows)))
display(Markdown(modern.moe_compensation_text(t["modern_sensitivity"])))

# %% [markdown]
# **The ratios a planner ranks by.** An FP8 row beside its BF16 twin (same source, model,
# device and layout) gives the FP8 speedup, the quantity an FP8 claim is about; rows of one
# model on one cluster, in one publication, precision and scaling, give the layout ratios a
# planner orders. Because the step model ranks the one published MoE layout sweep here in
# reverse, `layouts.plan` (and `predict --search`) refuses MoE models, and `predict` warns on
# one: its MoE steps are a rough bound (the term split below says why).

# %%
ratio_fmt = {"published_speedup": "{:.2f}×", "predicted_speedup": "{:.2f}×", "speedup_error": "{:+.1%}"}
display(t["fp8_pairs"].style.format(ratio_fmt).hide(axis="index"))
ranking_fmt = {"published_ratio": "{:.2f}×", "predicted_ratio": "{:.2f}×", "ratio_error": "{:+.1%}"}
display(
    t["modern_ranking"]
    .style.format(ranking_fmt | {"group_spearman_rho": "{:+.2f}"}, na_rep="—")
    .hide(axis="index")
)

# %% [markdown]
# Every row, term by term (shares of the predicted step; a refused row with its reason), and the
# three new assumptions moved one at a time (median |error| and signed error per group): how
# much of a group's miss one assumption could hold, not a fit.

# %%
share_fmt = {c: "{:.0%}" for c in modern_rows.columns if c.endswith("_share")}
display(
    modern_rows.style.format(
        {"published_step_s": "{:.2f}", "predicted_step_s": "{:.2f}", "tokens_per_gpu": "{:,.0f}"}
        | {"model_flops_per_step": "{:.3g}", "peak_flops_total": "{:.3g}"}
        | {c: "{:+.1%}" for c in ("error", "null_error", "mfu40_error")}
        | share_fmt,
        na_rep="—",
    ).hide(axis="index")
)
sens = t["modern_sensitivity"]
display(
    sens.style.format(
        {c: "{:+.1%}" if "signed" in c else "{:.1%}" for c in sens.columns if "|" in c or "signed" in c}
    ).hide(axis="index")
)

# %% [markdown]
# **Which way each source misses** (median signed error: a source the model is biased on), and
# **leave-one-source-out**: the share refitted on every other source, then this source predicted
# — how the model carries to a source it has not seen, beyond the one fixed split.

# %%
by_source, loso = t["per_source"], t["leave_one_source_out"]
err = {c: "{:+.1%}" if "signed" in c else "{:.1%}" for c in by_source.columns if "error" in c}
display(by_source.style.format(err, na_rep="—").hide(axis="index"))
display(
    loso.style.format(
        {"fitted_without_it": "{:.3f}", "median_abs_error": "{:.1%}", "max_abs_error": "{:.1%}"}, na_rep="—"
    ).hide(axis="index")
)
by_device = t["per_device"]
display(
    by_device.style.format(
        {"median_signed_error": "{:+.1%}", "median_abs_error": "{:.1%}", "null_median_abs_error": "{:.1%}"}
    ).hide(axis="index")
)

# %% [markdown]
# **Ranking.** A layout search needs the order right more than the seconds. Per published sweep,
# Spearman's ρ between predicted and published throughput — but the sweeps span model sizes, so
# much of that order is FLOPs per step, and the null model (which knows nothing of layouts)
# ranks them as well: its ρ is beside it. The quantity a search must rank is the efficiency,
# MFU, which no constant-utilisation model can order: `rho_mfu`, with the predicted MFU's spread
# over the sweep (a ρ over a spread smaller than the model's error is noise).

# %%
rank = t["ranking"]
display(
    rank.style.format(
        {"rho_throughput": "{:+.2f}", "null_rho_throughput": "{:+.2f}", "rho_mfu": "{:+.2f}"}
        | {"predicted_mfu_spread": "{:.1%}"}
    ).hide(axis="index")
)
display(Markdown(scores.ranking_text(rank, LAYOUT_MARGIN)))

# %% [markdown]
# **Where the held-out rows miss** (test and the holdouts; beyond 25%, or the five largest):
# the compute terms are shared by
# every row and fitted on one subset, so a miss most likely sits in a row's largest non-compute
# term, or in what the row's device or framework does differently. **Refused rows** are listed
# with the model's reason.

# %%
display(t["misses"].style.format({"error": "{:+.1%}"}).hide(axis="index"))
display(t["refused"].style.hide(axis="index"))

# %% [markdown]
# **The history of the test error**, one entry per model revision (entries before the freeze
# carry only the then out-of-fit rows, read from the committed renders). The last line is this
# render; it should equal the last recorded revision unless the model changed since.

# %%
history = t["history"]
display(
    history.style.format(
        {c: "{:.1%}" for c in history.columns if "error" in c}
        | {"fitted_share_of_mamf": "{:.4f}"}
        | {c: "{:.0f}" for c in history.columns if c.endswith("_rows")},
        na_rep="—",
    ).hide(axis="index")
)

# %% [markdown]
# **Every row.** `error_at_default` is the same row at the default share (1.0); `null_error` the
# null model's; `unstated` lists the inputs the source leaves out and the value the file's
# stated rules set. The full table is `tables/validation.csv`.

# %%
shown = df[
    ["id", "split", "device", "published", "predicted_step_s", "published_step_s", "error", "null_error"]
    + ["loo_error", "unstated", "fits_memory", "memory_gib"]
]
display(
    shown.style.format(
        {
            "published_step_s": "{:.3g}",
            "predicted_step_s": "{:.3g}",
            "error": "{:+.1%}",
            "null_error": "{:+.1%}",
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
            f"`step_terms.memory_terms` finds {len(short)} published rows short of memory ({', '.join(short.id[:6])}"
            f"{', …' if len(short) > 6 else ''}; up to {short.memory_gib.max():.0f} GiB per device; a row fits "
            "when its modelled memory is at most 90% of the card's, `rates.Assumptions.memory_margin` 0.1): "
            "those runs "
            "did fit, so the memory model overstates them (Korthikanti's Table 2 count of every activation a "
            "layer keeps, for the stage with the most micro-batches in flight). The CLI refuses such a "
            "layout; the validation prices it anyway, and says so here."
        )
    )

# %%
memory = t["memory_check"]
display(Markdown(memory_check.memory_text(memory)))
memory.round(2)

# %% [markdown]
# ## 3 · The decomposition against a published breakdown
#
# The step's sum can be right for wrong reasons. Korthikanti et al.'s Table 4 gives the forward
# and the backward time of one layer of their 22B model (TP 8, micro-batch 4) under each
# recompute and sequence-parallel setting; the step model's terms for the same layer, at the
# fitted share. This paper is the fit source (its step times set that share), so the levels
# below are in-sample. What the fit barely moves is the split: backward over forward, set beside
# the rule of thumb (the backward is twice the forward, three times with full recompute) as the
# null model. Where the model's ratio is closer to the published one than the rule's, the
# decomposition carries information the fit did not put there.

# %%
terms = t["per_term"]
display(
    terms.style.format(
        {c: "{:.2f}" for c in terms.columns if c.endswith("_ms")}
        | {"forward_error": "{:+.1%}", "backward_error": "{:+.1%}"}
        | {c: "{:.2f}" for c in terms.columns if c.endswith("_over_forward")}
    ).hide(axis="index")
)

# %% [markdown]
# **One term out of sample.** A breakdown from the fit source tests the split in-sample; a pair
# of published runs that differ in one switch tests that switch's term on rows the model was not
# shaped on. Tensor-parallel communication overlap (async TP) is the switch the published runs
# pair most often (`ablations.tp_overlap_pairs`: same source, device, model and layout; the step
# with the overlap off over the step with it on, published against predicted).

# %%
pairs = t["tp_overlap_pairs"]
gain_fmt = {"published_gain": "{:.3f}", "predicted_gain": "{:.3f}", "gain_error": "{:+.1%}"}
gain_fmt |= {c: "{:.2f}" for c in pairs.columns if c.endswith("_s")}
display(pairs.style.format(gain_fmt).hide(axis="index"))
display(Markdown(ablations.tp_overlap_text(pairs)))

# %% [markdown]
# **Unstated interleaving depth.** Narayanan et al. (§5.1) and Llama 3 say they interleave the
# pipeline but not how deep. The table above uses one layer per virtual stage (the deepest the
# layers allow); here is the smallest depth beside it. The rule was chosen after seeing both
# on the development rows, before the test rows were collected. (With uneven end
# stages, Llama 3's smaller depths cannot split its 7-layer end stages evenly; the table takes
# the 128 slots as if they could.)

# %%
display(
    t["interleave_sensitivity"]
    .style.format("{:+.1%}", subset=["error_deepest", "error_smallest"])
    .hide(axis="index")
)

# %% [markdown]
# **Known misreadings, for the next revision** (post-freeze, to be logged as such in the
# history, the frozen numbers kept): torchtitan's 2024-12 H100s are 96 GB HBM2e parts at 500 W
# (priced here as the 80 GB SXM part); torchtitan's selective checkpointing recomputes every
# second GEMM (priced as attention-core recompute, free under flash); `tp_overlap_share` 0.8
# predicts a larger async-TP gain than torchtitan publishes; Megatron-Core runs of 2024 overlap
# their gradient reduction (the stated rule assumes none); and one share of MAMF fitted on
# large-hidden A100 rows does not carry to small-hidden H100 runs (no GEMM-shape term beyond t₀).
# One is in, as a post-freeze revision in the history: flash attention runs at each device's
# published FlashAttention-2 share (`devices.yaml`: 0.5 of A100's peak, 0.35 of H100's).

# %% [markdown]
# ## 4 · Where the time goes, row by row
#
# The predicted step of each fit and development run, term by term, as shares of its step (the
# step time is beside each row's name; the held-out rows' terms are in `tables/validation.csv`). Full recomputation shows as its own band (one more forward of
# every layer: a third more than forward + backward); pipelines carry their bubble; the rows
# with data parallelism carry the gradient reduction Megatron 2021–22 ran after the backward.

# %%
shown_rows = df[df.split.isin(["fit", "development"]) & (df.refused == "")]
plots.save_figure(figures.breakdown(shown_rows, title="predicted step, share per term"), out, "breakdown")

# %% [markdown]
# **Sensitivity.** Each assumption the predictor takes from a datasheet or a benchmark moved
# ±25% around its default, scored on the priced **test** rows, the fitted share held (not
# refitted: a refit on the fit rows would absorb part of each move); an efficiency stops at 1,
# and `change` shows the move it made.

# %%
sens = t["sensitivity"]
fmt = {"default": "{:.3g}", "value": "{:.3g}", "change": "{:+.0%}"}
fmt |= {"test_median_abs_error": "{:.1%}", "test_max_abs_error": "{:.1%}"}
display(sens.style.format(fmt).hide(axis="index"))

# %% [markdown]
# ## 5 · Calibrate here, predict here
#
# The same predictor, fed by this machine's calibration instead of a datasheet (R∞ and t₀
# fitted to its square matmuls, its copy bandwidth), against one training step measured here
# (median of timed steps; the split by operator class from `torch.profiler`, as in chapter 01).
# Nothing is fitted to the step. The fitted `matmul_share_of_mamf` plays no part here: the
# calibration replaces it. The calibration's benchmarks are re-timed beside the step
# (`bench.calibration_now`), since a shared machine's speed moves between hours. A second
# reading (`predicted_op_rates_s`, `calibrated.op_rate_reading`) replaces the square-matmul
# fit, the copy bandwidth and the flash share by what the step's own GEMMs, memory-bound ops,
# attention kernel and optimizer step reach when each is timed alone at its shapes
# (`op_rates`): it separates a wrong rate from a missing term. The goal: every class and the
# step within 15% (`analysis._calibrated_verdict`). The box's speed also moves within minutes,
# so every round's step is set against the prediction from the benchmarks re-timed in the same
# round (`calibrated.paired_step_errors`); where those paired errors spread wider than 15 points
# (interquartile range, `calibrated.PAIRED_IQR_LIMIT`) the run cannot score the model and says so.

# %%
check = t["calibrated_check"]
display(
    check.style.format(
        {"predicted_s": "{:.4f}", "measured_s": "{:.4f}", "predicted_op_rates_s": "{:.4f}"}
        | {"error": "{:+.1%}", "error_op_rates": "{:+.1%}"}
    ).hide(axis="index")
)
plots.save_figure(figures.calibrated(check), out, "calibrated")
display(Markdown(analysis.calibrated_text(records, check)))

# %% [markdown]
# ## 6 · The articles' cases
#
# **B15 — the 64 × A100 ladder.** The predictor for the stated cluster and model, with each
# rung's change applied in turn (`worked_examples.B15_CHANGES`). Our reading of what the article leaves
# out is `worked_examples.B15_CASE`, printed first (the article states the model, the 64 A100s, TP 4,
# ZeRO-2 and the 512 sequences; the micro-batch of 1 is ours). Two rungs get no change: GPUDirect
# RDMA would raise the inter-node bandwidth, for which the article gives no per-port figure for its
# cluster; locked clocks have no term.

# %%
print("B15_CASE:", worked_examples.B15_CASE)
ladder, b15_sens = t["b15_ladder"], t["b15_sensitivity"]
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
display(Markdown(case_texts.b15_text(ladder, b15_sens, m["published_max_abs_error"])))
secs = ["baseline_step_s", "dp_comm_s", "dp_comm_exposed_s"]
display(
    b15_sens.style.format(
        {**dict.fromkeys(secs, "{:.2f}"), "dp_overlap": "{:.1f}", "memory_gib": "{:.1f}"}
    ).hide(axis="index")
)
fig = figures.breakdown(
    ladder,
    label_col="rung",
    title="B15 ladder: predicted step per term (◆ the article's step)",
    seconds=True,
    marks=ladder.article_step_s,
)
plots.save_figure(fig, out, "b15_ladder")

# %% [markdown]
# **A17/A19 — 13B on 8 × 910B.** The predictor's step for the stated layout (`worked_examples.A19_CASE`:
# nothing recomputed, since the command's recompute flags act only with a granularity it omits;
# chapter 04's configuration of record, the layout chapter 08 prices for A15) with each attention
# kernel, the MFU it implies, and the MFU the
# article's stated step would mean. The 910B figures are approximate (no vendor datasheet), and
# the fitted A100 matmul efficiency is carried over: a reading, not a measurement. Chapter 08
# prices the same layout at the course's default assumptions with the command's own (unfused)
# attention, so its step differs from both rows here by the efficiency each assumes.

# %%
a19 = t["a19_case"]
cols = [
    "attention",
    "recompute",
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
display(Markdown(case_texts.a19_text(a19)))

# %% [markdown]
# ## 7 · Your own layout
#
# ```sh
# python -m mfulab predict --preset llama2-70b --devices 1024 --device h100-sxm --tp 8 --pp 4 \
#     --global-batch 1024 [--calibration results/<machine>/calibration] [--search]
# ```
#
# prints the breakdown and MFU of one layout; `--search` ranks every layout the planner finds
# (`layouts.candidate_layouts`) by the predictor's step time. It runs with the GEMMs at the
# course's at-scale share of MAMF (`rates.AT_SCALE_MATMUL_SHARE_OF_MAMF`, 0.8: the share every
# chapter's planner uses, within 0.025 of the value fitted above, and printed in its output) unless
# told otherwise: `--assume matmul_share_of_mamf=<the value fitted above>` (any
# field of `Assumptions`, repeatable) puts this chapter's exact fit in; `--framework` names what issues
# the DP collectives (`--shard-group` for FSDP's hybrid sharding), `--tp-comm-overlap` and
# `--overlap-param-gather` the overlaps. A layout that
# cannot exist or does not fit memory (by `step_terms.memory_terms`, which finds the Llama 3 rows
# above short of 80 GB, though they ran), an unknown device, or what the model does not cover
# (e.g. naive attention with context parallelism, an FP8 step without its scaling recipe) is
# refused with the reason.

# %%
verdicts.publish_claims(out, o.claims, o.metrics)  # no claim rows: the stability note compares the numbers
display(Markdown(stability_note(out)))
