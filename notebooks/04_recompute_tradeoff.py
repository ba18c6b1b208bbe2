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
# # 04 · Recompute: what activation checkpointing saves, what it costs, and what it does to MFU
#
# Training keeps every intermediate tensor the backward pass will need. **Activation
# recomputation** (checkpointing) drops some of them and runs part of the forward pass again
# during backward: memory for FLOPs. This notebook
#
# 1. counts, exactly, which tensors one layer keeps and who keeps them;
# 2. checks Korthikanti et al.'s Table 2 against that count, for every policy;
# 3. measures the trade-off: memory vs step time, and MFU vs HFU vs tokens/s (claim **B7**);
# 4. compares the two "selective" policies — recompute the attention core or the MLP (**A14**);
# 5. plans memory at the articles' scale: the 13B setup (**A17**), 7B/70B on 80 and 141 GB
#    cards, and ZeRO-2 vs ZeRO-3 (**A12**).
#
# The policies are switches of the reference model: `none`; `selective` (attention core:
# scores, softmax, A·V — Korthikanti's choice); `mlp` (norm + MLP — article A's
# suggestion); `full` (whole block); `every_k` (`full` on the first k blocks, Megatron's
# `--recompute-num-layers`); `sac` (torch's selective activation checkpointing, keeping matmul
# outputs and recomputing the rest).

# %% tags=["parameters"]
params = {}  # the profile's values (papermill injects them); empty: the defaults, the laptop profile
out_dir = ""  # set by the runner; empty: scratch/recompute
from_dir = ""  # analyse measurements from this folder instead of measuring

# %%
import pandas as pd
from IPython.display import Markdown, display

from mfulab import plots, results
from mfulab.notebook import setup, stability_note
from mfulab.studies.recompute import analysis, figures, planner, stated
from mfulab.verdicts import summary_line

out, p, records = setup("recompute", params, out_dir=out_dir, from_dir=from_dir)
print(
    f"device: {records['device_name']} ({records['device']}), {records['num_threads']} threads; "
    f"model {records['config']['name']}: {records['config']['n_layers']} layers, "
    f"d_model {records['config']['d_model']}, seq {records['config']['seq_len']}, {p.attn_impl} attention"
)
if records["skipped"]:
    print("skipped policies:", records["skipped"])

# %% [markdown]
# ## 1 · Where activation memory comes from
#
# A pack hook (`torch.autograd.graph.saved_tensors_hooks`) sees every tensor autograd keeps
# for backward. Storages are deduplicated (a view and its base count once), parameters are
# excluded, and each tensor is labelled with the module and the op that kept it. One layer,
# no recompute:

# %%
fig = figures.plot_saved_by_op(records)
plots.save_figure(fig, out, "saved_by_op")
saved = analysis.saved_table(records)
results.save_table(out, "saved_tensors", saved)
layer0 = saved[(saved.policy == "none") & (saved.layer == 0)]
layer0.assign(MiB=layer0.bytes / 2**20)[["module", "op", "shape", "dtype", "MiB"]]

# %% [markdown]
# ## 2 · Korthikanti's Table 2 vs the exact count
#
# Table 2 gives s·b·h·(34 + 5·a·s/h) bytes per layer for 16-bit activations with dropout.
# Our reference model has fp32 activations and no dropout, so the same derivation gives
# s·b·h·16e + e·a·s²·b with e = 4 bytes (`memory.activation_bytes_per_layer(...,
# bytes_per_elem=4, dropout=False)`). What the paper leaves out is named and added as
# residual terms: LayerNorm statistics (mean and rstd per token), the causal mask of naive
# attention, and — with SDPA — the flash kernel's log-sum-exp instead of the scores.

# %%
lm = analysis.layer_model_vs_measured(records)
results.save_table(out, "layer_model_vs_measured", lm)
fig = figures.plot_model_vs_measured(records)
plots.save_figure(fig, out, "model_vs_measured")
lm.groupby("policy")[
    ["measured_bytes", "korthikanti_bytes", "korthikanti_rel_error", "explained_rel_error", "residual_terms"]
].first()

# %% [markdown]
# ## 3 · The trade-off: memory, time, MFU, HFU, tokens/s (B7)
#
# Peak memory is measured in a **fresh process per point** (the peak RSS of a process never
# goes down, so no warm-up may run in it); on a GPU the allocator's peak is exact. The step
# time is the median of repeated forward+backward passes. FLOPs actually executed come from
# `FlopCounterMode`, which also counts the forward run again during backward — and shows
# that torch's non-reentrant checkpoint *stops early*: once the tensors backward needs are
# back, the rest of the region is not re-run, so the last matmul of each region (A·V, the
# MLP's down projection) is never recomputed. Analytic HFU formulas that assume a complete
# second forward over-count. The gradient gate checks that every policy computes the same
# gradients as `none`.

# %%
summary = analysis.policy_summary(records)
results.save_table(out, "policy_summary", summary)
assert (summary.gradient_max_abs_diff < 1e-5).all(), "a recompute policy changed the gradients"
summary.assign(step_added_MiB=summary.peak_step_added_bytes / 2**20)[
    [
        "policy",
        "step_added_MiB",
        "recompute_flops_share",
        "step_s",
        "step_q1_s",
        "step_q3_s",
        "step_n",
        "tokens_per_s",
        "gradient_max_abs_diff",
    ]
]

# %%
fig = figures.plot_pareto(records)
plots.save_figure(fig, out, "pareto")
peak = pd.DataFrame(records["peak"])
results.save_table(out, "peak_memory", peak)
peak.assign(step_added_MiB=peak.step_added_bytes / 2**20).pivot(
    index="policy", columns="micro_batch", values="step_added_MiB"
)

# %% [markdown]
# **B7 at a fixed memory budget.** Each policy takes the largest measured micro-batch whose
# step fits the budget, and we compare tokens/s with `none` at its own largest batch. MFU is
# model FLOPs × tokens/s ÷ peak, and recomputation does not change the *model* FLOPs per
# token — so MFU moves by exactly the same factor as tokens/s. Only HFU, which counts the
# recomputed FLOPs, can tell them apart.

# %%
budget = analysis.budget_table(records)
results.save_table(out, "budget", budget)
note = analysis.budget_note(records)
if note:
    print(note)
fig = figures.plot_budget(records)
plots.save_figure(fig, out, "budget")
budget

# %% [markdown]
# On this CPU a larger micro-batch buys little (the cores are already busy at the smallest
# one), so the extra FLOPs of recomputation show up as lost throughput. On a GPU, where small
# micro-batches under-fill the device, the planner below predicts the opposite. The article's
# sentence "MFU fell but tokens/s rose" cannot describe one model on one cluster: it
# describes HFU, or an MFU computed with recomputed FLOPs in the numerator.
#
# ## 4 · Which part to recompute (A14)
#
# Memory saved per recomputed FLOP, measured here and computed for one layer of the
# article's 13B model:

# %%
a14 = analysis.a14_table(records)
results.save_table(out, "a14_bytes_per_flop", a14)
a14

# %% [markdown]
# The attention core holds the a·s² tensors (scores, softmax, dropout) but costs only the
# two s²-sized matmuls to recompute; the MLP holds 19 of the 34 bytes per s·b·h (nine 2-byte tensors and the 1-byte dropout
# mask; Korthikanti et al. 2022, Table 2) but is the
# largest matmul of the layer. Recomputing the attention core frees far more memory per FLOP
# — Korthikanti's choice. With a flash-attention kernel those a·s² tensors are never stored,
# and the choice becomes moot: there is little left to save in attention.
#
# ## 5 · At the articles' scale: the planner (A17) and ZeRO stages (A12)
#
# The planner puts Table 2 and the ZeRO model-state formulas together for a stated cluster
# and predicts tokens/s under a **stated throughput model**: a device reaches 55% of its peak
# on hardware FLOPs at large micro-batches, half of that at 2,048 tokens per micro-batch, and
# pipelining idles (p − 1)/(m + p − 1) of the step. Rows that do not fit give the shortfall.
# Llama shapes (SwiGLU, grouped KV heads) are approximated by the GPT form of Table 2.

# %%
plans = planner.plans_table(p.planner_cases)  # no cases: an empty table, and A17 is left out
results.save_table(out, "planner", plans)
best = plans[plans.fits].sort_values("tokens_per_s", ascending=False).groupby("case").head(1)
fig = figures.plot_plans(plans)
plots.save_figure(fig, out, "planner")
display(best[["case", "policy", "micro_batch", "total_gib", "tokens_per_s", "mfu", "hfu"]])
plans[["case", "policy", "micro_batch", "total_gib", "fits", "shortfall_gib", "tokens_per_s", "mfu", "hfu"]]

# %%
zero = planner.zero_comparison(**stated.A12_ZERO)
results.save_table(out, "zero2_vs_zero3", zero)
zero

# %% [markdown]
# ## Claims
#
# Verdicts are computed from the numbers above: B7 (same batch) from the bootstrap interval
# of the per-token time ratio; B7 (budget) from whether MFU and tokens/s moved in opposite
# directions; A14 from which policy frees more bytes per recomputed FLOP; A17 and A12 are
# analytic.

# %%
claim_list, headline = analysis.outcome(records, p)
claims_df = results.publish_claims(out, claim_list, headline)
with pd.option_context("display.max_colwidth", None):
    display(claims_df)

display(Markdown(stability_note(out)))
# %% [markdown]
# ## What this study showed

# %%
s = summary.set_index("policy")
per_layer_mib = s.loc["none", "saved_bytes_layers"] / records["config"]["n_layers"] / 2**20
lines = [
    f"* One layer of {records['config']['name']} keeps {per_layer_mib:.1f} MiB for backward at micro-batch "
    f"{records['base_micro_batch']}; Table 2, adapted to fp32 without dropout, predicts every policy within "
    f"{lm.korthikanti_rel_error.abs().max():.1%}, and the named residual terms close the gap to "
    f"{lm.explained_rel_error.abs().max():.2%}."
]
full = analysis.full_vs_none(records)
if full["memory_share"] is not None:
    lines.append(
        f"* Full recompute cut the memory a step adds to {full['memory_share']:.0%} for "
        f"{s.loc['full', 'recompute_flops_share']:.0%} more FLOPs and {full['step_time_ratio']:.2f}× "
        "the step time."
    )
lines.append(summary_line(claim_list))
display(Markdown("\n".join(lines)))
