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
# 4. compares the two "selective" policies — recompute the attention core or the MLP — with
#    and without a fused attention kernel (**A14**);
# 5. plans memory and throughput at the articles' scale with the course's step model: the 13B
#    launch command (**A17**), 7B/70B on A100 and H200 cards, and ZeRO-2 vs ZeRO-3 (**A12**),
#    with the sensitivity of every conclusion to the step model's assumptions.
#
# The policies are switches of the reference model: `none`; `selective` (attention core:
# scores, softmax, A·V — Korthikanti's choice); `mlp` (norm + MLP — article A's
# suggestion); `full` (whole block); `every_k` (`full` on the first k blocks: Megatron's
# `--recompute-method block --recompute-num-layers k`, one of the two readings in section 5);
# `sac`, PyTorch's *selective activation checkpointing*
# (`torch.utils.checkpoint.create_selective_checkpoint_contexts`, torch ≥ 2.4): the whole block
# is a checkpoint region, but a policy function keeps the output of every matmul (`mm`,
# `addmm`, `bmm`, the SDPA kernels) and recomputes every other op (LayerNorm, GeLU, masking,
# softmax), so backward re-runs no matmul. With naive attention QKᵀ is a `bmm`, so `sac` keeps
# the a·s² scores; it keeps its tensors in a cache of its own that the saved-tensor hooks of
# sections 1–2 cannot see (its memory is measured as a peak in section 3).

# %% tags=["parameters"]
params = {}  # the profile's values (papermill injects them); empty: the defaults, the laptop profile
out_dir = ""  # set by the runner; empty: scratch/recompute
from_dir = ""  # analyse measurements from this folder instead of measuring

# %%
from IPython.display import Markdown, display

from mfulab.analytic.articles import A_MFU_EXAMPLE
from mfulab.studies.recompute import analysis, claims, figures, layout_search
from mfulab.studykit import plots, verdicts
from mfulab.studykit.notebook import setup, stability_note
from mfulab.studykit.step_error import SWITCH_MARGIN, step_model_error_line
from mfulab.studykit.verdicts import summary_line
from mfulab.units import MIB

out, p, records = setup("recompute", params, out_dir=out_dir, from_dir=from_dir)
o = claims.outcome(records, p)  # every table below, the claims and the headline metrics, computed once
o.save_tables(out)
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
fig = figures.plot_saved_by_op(o.tables["saved_tensors"])
plots.save_figure(fig, out, "saved_by_op")
saved = o.tables["saved_tensors"]
layer0 = saved[(saved.policy == "none") & (saved.layer == 0)]
layer0.assign(MiB=layer0.bytes / MIB)[["module", "op", "shape", "dtype", "MiB"]]

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
lm = o.tables["layer_model_vs_measured"]
fig = figures.plot_model_vs_measured(lm)
plots.save_figure(fig, out, "model_vs_measured")
analysis.layer_model_summary(lm)

# %% [markdown]
# ## 3 · The trade-off: memory, time, MFU, HFU, tokens/s (B7)
#
# Peak memory is measured in a **fresh process per point** (the peak RSS of a process never
# goes down, so no warm-up may run in it); on a GPU the allocator's peak is exact. Step times
# are timed **interleaved**: each round runs every (policy, micro-batch) point once in a
# shuffled order, so drift hits every policy alike and comparisons pair rounds (the median
# per point is shown with its quartiles). FLOPs actually executed come from
# `FlopCounterMode`, which also counts the forward run again during backward — and shows
# that torch's non-reentrant checkpoint *stops early*: once the tensors backward needs are
# back, the rest of the region is not re-run, so the last matmul of each region (A·V, the
# MLP's down projection) is never recomputed. Analytic HFU formulas that assume a complete
# second forward over-count. `sac` recomputes no matmul, so its counted share is 0 (the counter
# counts matmuls only); its step time shows what the re-run element-wise ops and SAC's per-op
# policy dispatch cost (not separated here). The gradient gate checks that every policy
# computes the same gradients as `none` (to 1e-5 in fp32; to about one low-precision ulp under
# bf16/fp16 autocast, `analysis.GRADIENT_TOLERANCE`). Peak memory, gradients and step time run in
# the profile's `dtype` (the `dtype` column); the exact saved-bytes accounting and the FLOP count
# stay fp32, the single element size of the formula they check.

# %%
summary = o.tables["policy_summary"]
assert summary.gradient_gate_ok.all(), "a recompute policy changed the gradients"
summary_columns = (
    "policy dtype step_added_MiB recompute_flops_share step_s step_q1_s step_q3_s step_n tokens_per_s"
)
summary.assign(step_added_MiB=summary.peak_step_added_bytes / MIB)[
    summary_columns.split() + ["gradient_max_abs_diff"]
]

# %%
fig = figures.plot_pareto(records, summary, o.values["full_vs_none"])
plots.save_figure(fig, out, "pareto")
peak = o.tables["peak_memory"]
peak.assign(step_added_MiB=(peak.step_added_bytes / MIB).round(1)).pivot(
    index="policy", columns="micro_batch", values="step_added_MiB"
).astype(object).fillna("—")  # —: not measured (beyond the policy's first micro-batch over the budget)

# %% [markdown]
# **B7 at the same micro-batch.** The article's anecdote: full recompute took MFU from 50% to
# 40%, a 1.25× longer step. The FLOPs count behind it (Megatron's 96 vs 72 coefficient: one
# more forward of every layer, +33%) predicts a 1.33× compute time at equal hardware efficiency,
# i.e. 50% → 37.5% were the whole step compute, less where communication and waits take part of
# it (the anecdote is global MFU). Below: the measured step-time ratio full/none (full and none timed alone,
# `b7_rounds` paired rounds, interval widened by the run-to-run drift), the MFU it implies from
# 50%, both expectations, and the hardware FLOPs counted here (torch stops recomputing early, see
# above).

# %%
b7 = o.tables["b7_same_batch"]
b7.T.rename(columns={0: "value"})

# %% [markdown]
# **B7 at a fixed memory budget.** Each policy takes the largest measured micro-batch whose
# step fits the budget, and we compare tokens/s with `none` at its own largest batch. The
# search measures every policy at `micro_batches` and doubles the micro-batch of each policy
# that still fits until it no longer does (`micro_batch_limit`; "≥ N (search limit)" when
# `max_micro_batch` still fits). What moves, precisely: MFU = model FLOPs per token ×
# tokens/s ÷ peak, and recomputation does not change the *model* FLOPs per token, so MFU
# moves by exactly the factor tokens/s moves.
# HFU = hardware FLOPs per token × tokens/s ÷ peak counts the recomputed FLOPs too, so under
# recompute HFU > MFU, and against `none` HFU moves by the tokens/s factor *times* the
# hardware-FLOPs ratio: when tokens/s rises, MFU and HFU both rise (HFU more). What
# recompute changes is the gap HFU − MFU, not the direction. The hardware FLOPs here are
# FlopCounterMode's, which counts matmuls only: `sac` re-runs no matmul, so its HFU equals its
# MFU. The figure's whiskers are the tokens/s ratio's interval; a policy whose interval holds 1
# is "inconclusive" (its verdict is under its name).

# %%
budget = o.tables["budget"]
note = analysis.budget_note(records)
if note:
    print(note)
fig = figures.plot_budget(records, o.tables["budget"])
plots.save_figure(fig, out, "budget")
budget

# %% [markdown]
# On a CPU a larger micro-batch buys little (the cores are already busy at the smallest
# one; the table above shows whether it did on the device that ran), so the extra FLOPs of
# recomputation show up as lost throughput. On a GPU a larger micro-batch can pay for them
# where a small one under-fills the device; the planner below asks the course's step model
# (chapter 09) whether it does at the articles' scale. Either way, the article's "MFU dipped while
# tokens/s rose" cannot describe one model on one cluster in global MFU: neither MFU nor HFU
# can fall while tokens/s rises. An MFU that dips has changed its FLOPs count (a different
# formula or sequence length), its device count, or its convention: local MFU (article B
# §1.1, the compute-busy time alone) can fall while tokens/s rises, since recompute lengthens
# the busy time while a larger batch cuts the waits.
#
# ## 4 · Which part to recompute (A14)
#
# Article A (§5.1) recomputes the MLP and keeps the attention activations "for models around
# 100B parameters"; Korthikanti et al. recompute the attention core instead. The yardstick:
# activation bytes freed per FLOP recomputed. What decides it is the attention kernel.
# Korthikanti assumed non-fused attention, which stores the a·s² scores, softmax and dropout
# (5·a·s²·b bytes per layer in 16-bit): large, and cheap to recompute. A fused (flash) kernel
# never stores them. What torch's SDPA keeps here, for layer 0 (saved-tensor hooks):

# %%
o.tables["a14_sdpa_saves"]

# %% [markdown]
# q, k and v (which the projections' backward needs anyway), the output (the same storage as
# the output projection's input) and one fp32 log-sum-exp per row and head: all that
# recomputing a fused core frees. At the claim's scale, one layer of a ~100B-class model (the
# 145.6B GPT of Narayanan et al. 2021, Table 1; its layer is GPT-3's) and of the article's
# 13B, non-fused (Table 2 as printed: the claim's regime, since the article keeps "Q, K, V and
# the attention-score intermediates", which only an unfused kernel stores) and, as the
# sensitivity reading, with a fused kernel (the default today: FlashAttention already recomputes
# the scores); bytes freed per million recomputed FLOPs, and how many times more the MLP frees:

# %%
a14_regime = o.tables["a14_verdict"]
a14_regime

# %% [markdown]
# The same quantity measured on the reference model with both attentions: exact saved bytes,
# divided by one basis for every row, `flops_recomputed`, the region's matmuls run once more in
# full (4·b·s²·h per layer for the core, 2·2·b·s·h·d_ff for the MLP), as in the table above.
# `flops_counted` is what FlopCounterMode saw torch's non-reentrant checkpoint re-run (naive
# attention): half, since it skips each region's last matmul (section 3); blank for the fused
# core, which the counter does not see on a CPU.

# %%
o.tables["a14_measured"]

# %%
split = analysis.table2_split()
display(
    Markdown(
        "Where Table 2's bytes sit (Korthikanti et al. 2022, Sec. 4.1; 16-bit activations with "
        f"dropout): {split['total_per_sbh']:.0f}·s·b·h + {split['scores_per_as2b']:.0f}·a·s²·b bytes "
        "per layer, the a·s²·b terms being the scores, softmax and attention dropout. Of the "
        f"{split['total_per_sbh']:.0f}·s·b·h, the MLP holds {split['mlp_per_sbh']:.0f} (its first "
        "linear's input 2, the GeLU input 8, the second linear's input 8, the dropout mask 1), the "
        f"attention block {split['attention_per_sbh']:.0f} and the two LayerNorm inputs "
        f"{split['norms_per_sbh']:.0f}."
    )
)

# %% [markdown]
# Per FLOP the comparison reduces to closed forms: the non-fused core frees 5a/4h bytes per
# FLOP, the MLP 19/16h, so the core wins by 20a/19 at any sequence length (Korthikanti's
# choice). A fused core frees a/(s·h), so the MLP wins by 19s/16a. Recomputing the whole
# attention block (QKV, core, projection) instead frees 11 of the 34 s·b·h, and the MLP frees
# 19(8h + 4s)/16(11h + 4a) times as much per FLOP: more only above s = (24h + 64a)/76 tokens,
# which the ~100B layer at 2048 tokens is below. So whether "recompute the whole MLP, keep the
# attention" is the better choice depends on which attention recompute it is set against, and
# the reasons the article gives fail for the whole MLP: it is the most expensive part to redo,
# and with a fused kernel the attention is not the large part.
#
# "The MLP" has a second reading. The article names MindSpeed, and MindSpeed's one option that
# recomputes part of the MLP, `--recompute-activation-function`, re-runs the GeLU alone: it frees
# the GeLU's 4h-wide output (8·s·b·h of the MLP's 19) and re-runs no matmul. Per matmul FLOP it
# wins by construction: its cost is memory-bound work this yardstick does not count (nor does it
# count the unfused core's softmax and dropout). The article's words support both: "把 MLP
# 部分设置为不保存" (the MLP part; it asks whether the MLP layer takes `recompute_granularity`, a
# layer-level switch) and, for its reasons, "MLP 中间层的 activation 计算量相对小" (the MLP's
# intermediate activation, the GeLU's output). Each A14 row is judged under both readings; where
# they disagree the row is not checkable, with both answers in it. The per-FLOP table above
# carries the whole MLP, the reasons table below both. The reasons in
# numbers, as shares of the layer's forward FLOPs (matmuls) and of its activation bytes:

# %%
a14_reasons = o.tables["a14_reasons"]
a14_reasons

# %% [markdown]
# How the per-FLOP comparison moves with the sequence length:

# %%
o.tables["a14_sequence_sensitivity"]

# %% [markdown]
# ## 5 · At the articles' scale: the planner (A17) and ZeRO stages (A12)
#
# The planner prices every (policy, micro-batch) of a stated case with the course's one step
# model (`step.step_time`, validated against published runs in chapter 09), on the case's
# device from `devices.yaml` (the 910B, A100 or H200: peak, memory, links). Its step holds the
# GEMMs under a roofline at `planner_matmul_share_of_mamf` of the device's best measured GEMM,
# attention, memory-bound ops and the optimizer. It adds the recomputed forward (`block:k`
# and `uniform:k` as Megatron runs them), the TP collectives that forward repeats, the 1F1B
# bubble and the data-parallel buckets. Its memory is Table 2 with the ZeRO model-state
# formulas, where a checkpointed segment's activations count again while that segment runs
# its backward (`memory.stage_activation_bytes`). A plan **fits** when it stays within the card
# less a stated **fragmentation margin** (`fragmentation_margin`, our assumption; ZeRO, Sec.
# 3.2, saw out-of-memory errors with over 30% of memory free in extreme cases). Llama shapes
# (SwiGLU, grouped KV heads) are counted as such. Table 2 as printed assumes non-fused
# attention (the a·s² scores stored); A17 keeps it, since the article's command names no flash
# kernel. The A100 and H200 cases run a fused kernel, the norm on those cards (its
# log-sum-exp in place of the scores, section 4): there `selective` frees almost nothing. The
# kernel is named on each panel, and the sensitivity table puts every case on one kernel in
# the rows `attention=naive` and `attention=fused`.
#
# **One step model.** The planner prices each step with the step model (chapter 09). Its GEMMs
# at 4,096-token sequences are already large enough to run near their ceiling at one sequence,
# so a larger micro-batch buys little, and recompute pays only where nothing else fits. The
# memory figures are Korthikanti et al.'s Table 2 accounting (`memory.py`).
#
# **A17** is the article's launch command: one machine of 8 cards, TP = 8, PP = 1, so DP = 1
# and ZeRO-2 has nothing to shard. Its `--recompute-method uniform --recompute-num-layers 12`
# reads two ways. In Megatron-LM and MindSpeed (`transformer_block.py`,
# `_checkpointed_forward`), `uniform` checkpoints the layers in chunks of 12 (12, 12, 12, 4):
# every layer is recomputed, and one chunk's activations are alive while it runs its
# backward (`uniform:12`). `block` checkpoints only the first 12 layers (`block:12`). The
# article's own explanation ("it sets how many layers are recomputed; tune it from more to
# fewer by measured memory") is the `block` reading; under `uniform` a smaller number means
# smaller chunks, less memory and the same 100% recompute. A third reading is the command as
# written: in Megatron-LM both flags act only with `--recompute-granularity full`, which it omits,
# so nothing is recomputed. The command's flags as Megatron-LM reads them, the configuration of
# record for every chapter that prices it (`analytic.articles.A_LAUNCH_COMMAND`):

# %%
display(o.tables["launch_command"].style.hide(axis="index"))

# %%
display(Markdown(step_model_error_line()))

# %%
plans = o.tables["planner"]  # no planner cases: an empty table, and A17 is left out
fig = figures.plot_plans(plans, o.tables["planner_chosen"])
plots.save_figure(fig, out, "planner")
chosen = o.tables["planner_chosen"]
chosen[
    "case policy micro_batch total_gib usable_gib fits tokens_per_s mfu hfu decision lead_over_next".split()
]

# %%
# article A §8 prices this chapter's A17 configuration (its 13B, 32 × 4096 tokens, 8 cards): its
# 2.4 s beside the planner's fastest step that fits, with no recompute and the command's
# unfused attention; MFU scales as 1 / step at a fixed count of FLOPs
a17 = plans[
    plans.case.str.startswith("A17") & plans.fits & (plans.policy == "none") & (plans.attention == "naive")
]
if len(a17):
    r = a17.sort_values("step_s").iloc[0]
    stated_s = A_MFU_EXAMPLE["step_time_s"]
    display(
        Markdown(
            f"**Beside article A §8.** The planner prices the launch command's configuration at "
            f"**{r.step_s:.1f} s** a step (MFU {r.mfu:.0%}, micro-batch {r.micro_batch}, no recompute, unfused "
            f"attention). Article A §8 gives the same 13B on the same 8 cards {stated_s:g} s a step and an MFU of "
            f"about {A_MFU_EXAMPLE['stated_mfu']:.2f}; at this model's FLOP count {stated_s:g} s would be an MFU "
            f"of **{r.mfu * r.step_s / stated_s:.2f}**, more work than the cards can do. Chapter 01's A19 row "
            "judges the article's arithmetic (it counts 6N × 3 FLOPs a token, and its "
            f"{A_MFU_EXAMPLE['stated_total_flops']:.3g} / ({A_MFU_EXAMPLE['n_devices']} × "
            f"{A_MFU_EXAMPLE['peak_flops_per_s']:.2g} × {stated_s:g}) is "
            f"{A_MFU_EXAMPLE['stated_total_flops'] / (A_MFU_EXAMPLE['n_devices'] * A_MFU_EXAMPLE['peak_flops_per_s'] * stated_s):.2f}, "
            f"not {A_MFU_EXAMPLE['stated_mfu']:g})."
        )
    )

# %%
if "a17_readings" in o.tables:
    display(Markdown("A17's readings, unfused attention (the command passes no `--use-flash-attn`):"))
    display(o.tables["a17_readings"])
    display(
        Markdown("The same with a fused attention kernel (§6.2 ran this setup with Flash Attention added):")
    )
    display(o.tables["a17_readings_fused"])

# %% [markdown]
# **With the layout searched.** The planner above holds each case's TP, PP and DP and lets a
# policy buy a larger micro-batch. In practice the memory recompute frees more often buys less
# model parallelism: a smaller TP, fewer stages, a wider DP (Narayanan et al. 2021 §3.5;
# Korthikanti et al. 2022 §5). Here each policy gets the course's layout search
# (`layout_search.layout_search`: every TP · PP · DP, virtual stages and micro-batch of the
# case's cards and batch, ranked by the same step model), its best fitting layout beside the
# fixed layout's best. Context for the rows below, which are judged at the articles' own
# layouts: not voted.

# %%
searched = o.tables["layout_search"]
display(Markdown(layout_search.compare_text(searched, chosen)))
searched.round(3)

# %% [markdown]
# **How much the decisions rest on the assumptions.** Each row varies one assumption and
# keeps the others as stated; `*` marks a decision that differs from the stated one. The
# GEMMs' share of MAMF scales every plan nearly alike; a GEMM kernel's launch latency t₀
# decides how much a small micro-batch under-fills the device, and with it whether a larger
# micro-batch pays for recompute; the margin decides what fits; the attention kernel decides
# how much `selective` frees (with a fused kernel almost nothing, section 4). The A17 rows above
# say whether the command fits at each margin; the summary at the end counts the rows that
# move a decision.

# %%
decisions = o.tables["planner_sensitivity"]
decisions

# %% [markdown]
# **B7 at article B's configuration, over the same variations.** For the 7B on 64 A100s, the
# largest micro-batch each recompute policy fits and its tokens/s against no recompute at its
# own largest, in every scenario; `bears_out` is the claim's "the batch doubles and tokens/s
# rise" (the B7 configuration row below votes over every line).

# %%
if "b7_config_scenarios" in o.tables:
    display(o.tables["b7_config_scenarios"].style.hide(axis="index").format(precision=3))

# %% [markdown]
# **A12.** ZeRO-3 keeps a shard of the parameters and gathers them for every micro-batch, in
# forward and again in backward, and reduce-scatters every micro-batch's gradients; ZeRO-2
# also reduces every micro-batch (each device keeps only its gradient shard) and gathers the
# updated parameters once per optimizer step. With m micro-batches accumulated per step the
# traffic is (m + 1)Ψ against 3mΨ: 1.5× only at m = 1. The first table takes the article's
# global batch (32 sequences, micro-batch 1) at several data-parallel widths; the second
# varies m alone. That ZeRO-3 holds less and moves more is its published design (*confirmed*,
# documented specification: ZeRO §5, §7); how much it
# saves is the article's claim ("确实很可观", indeed considerable): the third table gives the
# saving as a share of the 64 GiB card at the command's TP 8 and at the narrower widths the
# article leaves open. The saving is the bf16 parameters ZeRO-2 still replicates, 2Ψ/tp less
# one shard, so it shrinks as tensor parallelism already splits them.

# %%
display(o.tables["zero2_vs_zero3"])
display(o.tables["a12_accumulation"])
o.tables["a12_saving"]

# %% [markdown]
# A12's throughput sentence (for ~10B models below a thousand cards ZeRO-2 is usually faster)
# from the course's step model at the article's 13B on 910B cards: the stated case is its command
# (micro-batch 1, unfused attention, both stages on DeepSpeed's collectives: `--zero-stage` is
# DeepSpeed's flag), with four micro-batches per DP rank and the 910B's 200 Gb/s per card; then
# each input the article does not state varied at 64 and 512 cards (`kind` assumed), and one
# change to the command itself (micro-batch 4, `kind` configuration: reported, not voted). A
# ratio within the decisive margin (`zero2_faster` empty) decides nothing. ZeRO-2 against ZeRO-3
# is a switch (it changes the DP collectives and what overlaps them), so the margin is chapter
# 09's margin for a switch (`studykit.step_error.SWITCH_MARGIN`: the 90th percentile of the step
# model's ratio error on held-out published pairs that differ in a switch, at its largest with
# one source left out), not the narrower one
# between two parallel layouts. History: when the step model first priced FP8 and
# context-parallel runs, their pairs widened the one pooled margin the course then used
# (`studies/predict/validation_history.yaml`) and one stated size fell inside it, so this row went
# from confirmed (analysis) to analytic only; the margin per kind of comparison, measured since,
# is wider still for a switch. Its evidence names the sizes inside it.

# %%
o.tables["a12_throughput_sensitivity"]

# %% [markdown]
# ## Claims
#
# Verdict words (the rule is `docs/claims.md`): *confirmed* / *refuted* when a measurement in the
# claim's regime, a cited figure, a specification, an exact count or the article's own arithmetic
# decides; *(analysis)* when an analysis at the article's configuration decides, and *analytic
# only* when it cannot (a sensitivity row reverses it, or the reading does); *shown* / *not
# shown* for a mechanism in a toy regime; *inconclusive on this machine*; *not checkable* when
# nothing can be tested or two readings of the sentence disagree. Each row names its basis.
#
# Verdicts are computed from the numbers above. B7's 50% → 40% is global MFU (the article says
# so), and recompute stretches only the compute, a share c of the step: a compute slowdown r
# makes the step 1 + (r − 1)·c. The anecdote's global 50% puts c at 0.50 or more (local MFU
# cannot pass 100%); article B's only local figure, §1.1's 80%, gives c = 0.50 / 0.80 = 0.625.
# B7 (same batch, this machine): one process times compute only, so the measured ratio is r; the
# claim implies r between 1.25 (c = 1) and 1 + 0.25/0.50 = 1.50 (c = 0.50), and the FLOP count's
# 1.33 lies inside: shown when the interval, widened by this ratio's own run-to-run drift
# (`b7_ratio_drift`, set per profile from the box's spread between fresh runs: the cpu profile's
# yaml gives this box's), lies inside that band,
# not shown when it misses it, inconclusive on this machine otherwise (a toy regime; full and
# none are timed alone for several rounds). The policy sweep above times full against none in
# its own rounds, so its full/none ratio and B7's paired one differ by the run-to-run spread,
# well inside that drift. B7 (published): Korthikanti et al.'s Table 4 gives r = 1.39 for
# one 22B layer on A100s; at c = 0.625 the step stretches 1.24×, MFU 50% → 40.2%, the article's
# 40%; over c from 0.50 to 1 it stretches 1.19–1.39×. The article states no local MFU for this
# run, so the analysis cannot decide: analytic only (refuted (analysis)
# if 1.25× fell outside the range). B7 (the misjudgement): the anecdote's two figures under the
# article's global MFU, where MFU moves by exactly the factor tokens/s moves: 50% → 40% is 0.80×
# the throughput, which rolling back recovers; refuted (the article's own arithmetic), whatever
# the batch. B7 (budget): refuted by the identity
# MFU ∝ tokens/s (the article's own arithmetic: its §1.1 definition). B7 (configuration): the planner prices article B's own §5 cluster (7B, 64
# A100s, TP 4, ZeRO-2, flash attention) under Megatron's selective, the MLP and full recompute,
# which bound the article's own "attention module and FFN's first layer". The claim is stated
# at one configuration, so its stated case decides (`verdicts.at_stated_case`): yes if some
# reading doubles the largest micro-batch that fits and raises tokens/s, no if none does;
# confirmed or refuted (analysis) unless one of the planner's assumptions varied alone, the
# attention kernel among them (§2.3 names none; §5's baseline ran the standard one, §5.2's
# first step turned SDPA on), gives the opposite answer (analytic only). Where a policy doubles
# the batch, its tokens/s decide only beyond the step model's decisive margin of no recompute's
# (`studykit.step_error.SWITCH_MARGIN`); a
# scenario inside that margin cannot tell and reverses nothing
# (`article_rows.b7_config_claim`, `tables/b7_config_scenarios.csv`). A14's choice, by bytes freed per recomputed FLOP against the attention core and
# the whole attention block, in the claim's own regime, unfused attention (its premise: the
# attention keeps its large scores), with Flash Attention (its 13B's §3.2) beside it as context:
# confirmed (analysis) if the MLP wins against both in every layer, refuted (analysis) if the
# core wins in every layer, analytic only otherwise. A second row takes the choice with Flash
# Attention, as article A's own runs use it: the MLP against the whole attention block, decided
# only by a 20% margin either way in every layer (`stated.A14_DECISIVE_MARGIN`). Its reasons, by FLOP and byte shares (refuted (analysis) when the MLP
# is the costlier part to redo, or the attention frees fewer bytes than the MLP, in every layer).
# Each of these three rules reads "the MLP" as the whole MLP, the reading the article's words
# favour; MindSpeed's activation-function reading (section 4) is context beside it.
# Two more A14 rows take article A's framing sentences: "one-fold" (一倍) of wasted compute has
# two readings, the forward done twice (true of full recompute) and the step doubled (96/72 =
# 1.33×, false): not checkable, both in the evidence; GPT-3 175B's "several hundred GB" of
# activations (Table 2 at its configuration, ≥ 200 GB and above an 80 GB card: confirmed
# (analysis)). A17 (analysis at assumed configurations: the card's 64 GiB is devices.yaml's
# approximate 910B figure; the article states no memory or precision), one row whose readings of the flag vote (Megatron's uniform chunks, the
# article's block explanation, and the command with the flags Megatron-LM does not know dropped,
# the configuration of record: as written, Megatron-LM's parser would refuse them and not start):
# a reading says yes when the setting fits at every fragmentation margin of the grid
# and with the gradients in 2 bytes (the memory model's 16 B/param) and in 4 (Megatron's fp32
# `main_grad`, which chapters 02 and 05 reduce: 18 B/param), no when it fits at none;
# confirmed (analysis) when every reading says yes, refuted when every one says no, analytic
# only otherwise. A second A17 row takes "照着走一遍基本能跑通", §6's sentence on its whole
# procedure, on the command it shows: a flag neither Megatron-LM's parser nor MindSpeed's
# additions define stops argparse, so read as a step of the procedure the command is refuted
# (documented specification), read as §6.1's "key launch configuration, for reference" nothing
# is claimed of it as written; the readings disagree: not checkable. A12: ZeRO-3 needing less
# memory and moving more bytes at every data-parallel width is its published design (ZeRO §5,
# §7: confirmed, documented specification); how much it saves, "considerable", is read as at
# least 10% of the card (our line) at the command's TP 8, the other widths voting
# (`verdicts.at_stated_case`); its throughput
# sentence (for ~10B models below a thousand cards ZeRO-2 is usually faster) by the step model at
# the 13B on 64–512 910B cards: the stated case decides (ZeRO-2's step shorter beyond the
# decisive margin at most sizes, "usually" (往往) read as most: confirmed (analysis); ZeRO-3's:
# refuted (analysis)) unless an
# assumed input of the table above turns the answer (analytic only; a row within the margin
# turns nothing: `verdicts.at_stated_case`); and "ZeRO-2 slices the gradients before reducing
# them, which reduces communication" is decided at the command's own width, DP 1, where one
# data-parallel rank has nothing to slice or reduce, so no reading finds less communication
# (refuted, documented specification); wider, at DP 4 (reported, not voted: a change of the
# configuration), ZeRO's own count (§7.2) has a reduce-scatter plus an all-gather move what one
# all-reduce moves, and the reduce-scatter alone half of it.

# %%
claim_list = o.claims
verdicts.publish_claims(out, o.claims, o.metrics)  # tables/claims.csv: the full table
display(Markdown(verdicts.claims_markdown(o.claims)))

display(Markdown(stability_note(out)))
# %% [markdown]
# ## What this study showed

# %%
s = summary.set_index("policy")
per_layer_mib = s.loc["none", "saved_bytes_layers"] / records["config"]["n_layers"] / MIB
lines = [
    f"* One layer of {records['config']['name']} keeps {per_layer_mib:.1f} MiB for backward at micro-batch "
    f"{records['base_micro_batch']}; Table 2, adapted to fp32 without dropout, predicts every policy within "
    f"{lm.korthikanti_rel_error.abs().max():.1%}, and the named residual terms close the gap to "
    f"{lm.explained_rel_error.abs().max():.2%}."
]
full = o.values["full_vs_none"]
if full["memory_share"] is not None:
    lines.append(
        f"* Full recompute cut the memory a step adds to {full['memory_share']:.0%} for "
        f"{s.loc['full', 'recompute_flops_share']:.0%} more FLOPs and {full['step_time_ratio']:.2f}× "
        "the step time."
    )
    b = b7.iloc[0]
    lines.append(
        f"* At the same micro-batch the full-recompute compute took {b.time_ratio:.2f}× as long "
        f"[{b.time_ratio_lo:.2f}, {b.time_ratio_hi:.2f}]: global MFU {b.mfu_before_percent:.0f}% would fall "
        f"to {b.mfu_implied_percent:.1f}% were the whole step compute, and to "
        f"{b.mfu_implied_min_share_percent:.1f}% were compute only {b.min_compute_share:.0%} of it (global "
        f"50% with local MFU at most 100%); the article's {b.mfu_claimed_percent:.0f}% lies "
        + (
            "inside"
            if b.mfu_implied_percent <= b.mfu_claimed_percent <= b.mfu_implied_min_share_percent
            else "outside"
        )
        + f" that range (Megatron's 96/72 FLOPs: {b.mfu_megatron_percent:.1f}% for an all-compute step)."
    )
naive = a14_regime[a14_regime.attention == "naive"]
fused = a14_regime[a14_regime.attention == "fused"]
naive_reasons = a14_reasons[a14_reasons.attention == "naive"]
lines.append(
    "* A14: without a fused kernel (the article's regime) the attention core frees "
    + ", ".join(f"{1 / r['MLP ÷ core']:.0f}× ({r.config})" for _, r in naive.iterrows())
    + " more bytes per recomputed FLOP than the MLP, as Korthikanti et al. use it; with a fused "
    "kernel the MLP frees "
    + ", ".join(f"{r['MLP ÷ core']:.0f}× ({r.config})" for _, r in fused.iterrows())
    + " more than the core, but "
    + ", ".join(f"{r['MLP ÷ block']:.2f}× ({r.config})" for _, r in fused.iterrows())
    + " what the whole attention block frees. The whole MLP is not cheap to redo: it is "
    + ", ".join(f"{r['MLP FLOP share']:.0%} ({r.config})" for _, r in naive_reasons.iterrows())
    + " of the layer's forward FLOPs. Read as MindSpeed's activation-function recompute (the GeLU "
    "alone, no matmul) the choice wins by construction. A14's rows, in the claims table's order: "
    + ", ".join(c.verdict for c in o.claims if c.id == "A14")
    + "."
)
if len(plans):
    winners = chosen[chosen.decision]
    by_label = decisions.set_index("assumption varied")
    moved = by_label.apply(lambda r: r.str.endswith("*").any(), axis=1)
    stated_plans = by_label.iloc[0]

    def policy_of(cell: str) -> str:
        return cell.removesuffix(" *").split("@")[0]

    # a changed policy against a changed micro-batch only (the same policy, a neighbouring size)
    policy_moved = by_label.apply(
        lambda r: any(policy_of(v) != policy_of(stated_plans[c]) for c, v in r.items()), axis=1
    )
    movers = sorted({label.split("=")[0] for label in policy_moved[policy_moved].index})
    plan_names = ", ".join(winners.policy + "@" + winners.micro_batch.astype(int).astype(str))
    close = winners[winners.within_step_error]
    lines.append(
        f"* The planner's decisions ({plan_names}) rest on assumptions: of {len(moved) - 1} one-at-a-time "
        f"variations, {int(policy_moved.sum())} change some case's recompute policy "
        f"({', '.join(movers) or 'none'}) and {int(moved.sum() - policy_moved.sum())} more only its "
        f"micro-batch. {len(close)} of {len(winners)} lead the case's next policy "
        f"by no more than the step model's ±{SWITCH_MARGIN:.0%} (`lead_over_next`): there the planner "
        "ranks the policies, it does not decide between them; read its choices as illustrations."
    )
lines.append(summary_line(claim_list))
display(Markdown("\n".join(lines)))
