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
# # 01 · MFU accounting: what the number means and where a step's time goes
#
# **Model FLOPs utilisation** (MFU) is the model's useful arithmetic per second divided by
# what the hardware could do at its peak. It is the one number that says how much of the
# accelerator hours you pay for turns into training. This notebook takes it apart:
#
# 1. the definitions — MFU vs HFU, *global* vs *local* MFU (claim **B1**);
# 2. the FLOPs **conventions** that produce different MFUs for the same step;
# 3. a **counting check**: our analytic FLOPs against PyTorch's exact FLOP counter;
# 4. **modern blocks** (grouped-query and latent attention, sliding windows, mixtures of
#    experts): their exact count, and what six training frameworks print for the same run;
# 5. the **denominator**: datasheet peak vs the matmul ceiling measured on this device;
# 6. a **measured training run**, split into the four losses of the source article (**B2**);
# 7. **inside the step**: an operator profile (a trace you can open), the waterfall of losses
#    built from it, and the measured MFU next to published ones;
# 8. the articles' own arithmetic (**A19**, **B15**, **A1**), checked step by step.
#
# Every number below is computed or measured by `lib/mfulab` in this run; the claims table
# at the end derives its verdicts from those numbers.

# %% tags=["parameters"]
params = {}  # the profile's values (papermill injects them); empty: the defaults, the laptop profile
out_dir = ""  # set by the runner; empty: scratch/mfu
from_dir = ""  # analyse measurements from this folder instead of measuring

# %%
import pandas as pd
from IPython.display import Markdown, display

from mfulab import results
from mfulab.analytic import flops
from mfulab.measure import calibration, opprofile
from mfulab.studies.mfu import analysis, article_arithmetic, claims, figures, run_checks, time_split
from mfulab.studykit import plots, verdicts
from mfulab.studykit.notebook import setup, stability_note
from mfulab.studykit.verdicts import summary_line
from mfulab.units import si

out, p, records = setup("mfu", params, out_dir=out_dir, from_dir=from_dir)
o = claims.outcome(records, p)  # every table below, the claims and the headline metrics, computed once
o.save_tables(out)
print(
    f"device: {records['device_name']} ({records['device']}), {records['num_threads']} threads, "
    f"model {p.preset}: {records['n_params']:,} parameters"
)

# %% [markdown]
# ## 1 · Definitions
#
# $$\mathrm{MFU} = \frac{\text{model FLOPs per token} \times \text{tokens/s}}{\text{devices} \times \text{peak FLOP/s per device}}$$
#
# * **Model FLOPs** count what the model needs: one forward and one backward pass per token.
#   **Hardware FLOPs** add what the implementation runs a second time, such as activation
#   recomputation; dividing those by the peak gives **HFU** (Chowdhery et al. 2022, App. B;
#   Korthikanti et al. 2022). Recomputed FLOPs enter HFU's numerator, never MFU's (MFU can
#   still rise with recompute, where the memory it frees buys a faster layout: chapter 04).
# * **Global MFU** divides by the wall clock of the whole job: start-up, data waits,
#   communication, checkpoints, everything. **Local MFU** divides only by the time the device
#   was busy computing. The source article (B1) recommends global MFU for reporting and cost,
#   local MFU only for locating slow operators.
#
# The article's worked example for B1 (7B model, 512 × 4096 tokens per step, 64 × A100 at
# 312 TFLOP/s dense bf16), recomputed under its own 6 × 7e9 FLOPs per token and under each
# named convention with the exact Llama-2-7B parameter count:

# %%
o.tables["b1_arithmetic"]

# %%
display(Markdown(article_arithmetic.b1_note()))

# %% [markdown]
# The ideal step is a rounding in the prose that the article's MFU figures do not use: a note
# under B1's arithmetic row, not a claim of its own (the rule in `docs/claims.md`).
#
# Beyond the article's own figures, the same step time reads as a different MFU under each
# convention: the rounded N (7e9 for 6.74e9) and the missing attention term alone move it by
# several points at 10.2 s. **An MFU without its convention and denominator is not a number.**
#
# ## 2 · FLOPs conventions side by side
#
# | name | FLOPs per token | source |
# |---|---|---|
# | `6n` | 6N (N: every parameter) | Kaplan et al. 2020, §2.1 (C ≈ 6N, with N the non-embedding parameters and the context term dropped) |
# | `palm` | 6N + 12·L·H·Q·T | Chowdhery et al. 2022 (PaLM), App. B |
# | `causal` | 6N + 6·L·H·Q·T | PaLM's attention term halved for the causal mask; Kaplan et al. 2020, Eq. 2.2 (C_forward ≈ 2N + 2·n_layer·n_ctx·d_attn) |
# | `megatron` | 72·l·h²(1 + s/6h + V/12lh), from the shape (l, h, s, V), no N | Korthikanti et al. 2022, App. A |
#
# The gap between them is the attention matmuls (QKᵀ and A·V), which grow with the sequence
# length T while 6N does not. `megatron` is derived for a GPT block (4h MLP, as many KV heads
# as query heads); for Llama shapes (SwiGLU, grouped KV heads) it drifts from the exact count,
# which is why it can read below `6n` for Llama-2-70B at short T.

# %% [markdown]
# **This run's model, by hand.** The three parameter-count conventions in the few lines a reader
# should own, for the model the run below trains (the library's `flops.flops_per_token` computes
# the same, and the asserts check it), then the MFU division for its measured steady step:

# %%
cfg = p.model_config()
n_params = flops.param_count(cfg)  # N: every parameter, embeddings included
head_width = cfg.d_model // cfg.n_heads  # Q, per head
attention_flops = 12 * cfg.n_layers * cfg.n_heads * head_width * cfg.seq_len  # QKᵀ and A·V, fwd + bwd
by_hand = {
    "6n": 6 * n_params,  # 2N forward + 4N backward (Kaplan et al. 2020, §2.1)
    "palm": 6 * n_params + attention_flops,  # + the full T×T attention (PaLM, App. B)
    "causal": 6 * n_params + attention_flops / 2,  # the causal mask halves it
}
for name, per_token in by_hand.items():
    assert per_token == flops.flops_per_token(cfg, convention=name), name
step_tokens = records["train"]["tokens_per_step"]
steady_step_s = o.values["breakdown"]["steady_step_s"]
ceiling_flops_per_s = o.values["breakdown"]["ceiling_flops_per_s"]  # best matmul, timed in the run (§6)
for name, per_token in by_hand.items():
    mfu = per_token * step_tokens / steady_step_s / ceiling_flops_per_s
    print(
        f"{name:>6}: {per_token / 1e6:6.2f} MFLOP/token × {step_tokens:,} tokens / {steady_step_s:.3f} s "
        f"/ {ceiling_flops_per_s / 1e9:.1f} GFLOP/s = {mfu:.1%} of the ceiling"
    )

# %% [markdown]
# Each convention over `6n`, for the presets at sequence lengths up to 32k. A preset keeps its
# shape at every T; where it has a learned position table (the GPT-2 and GPT-3 presets) the table
# grows to T rows, so its N grows with T too (GPT-2 124M at 32,768 tokens: N = 148.8 M; with its
# real 1,024-row table, `palm` ÷ `6n` would read 5.85 there, not 5.06):

# %%
conv = o.tables["conventions"]
over_6n = conv.pivot_table(index=["preset", "seq_len"], columns="convention", values="relative_to_6n")
over_6n.round(3).reset_index()  # flat columns: one row per preset and length

# %%
fig = figures.plot_attention_share(conv)
plots.save_figure(fig, out, "attention_share")

# %% [markdown]
# **nanoGPT's `estimate_mfu`** (karpathy/nanoGPT, `model.py`), the MFU most people first meet,
# is `palm` with two choices of its own: N is `get_num_params(non_embedding=True)`, every
# parameter less the learned position embeddings (the tied token embedding stays, as the LM
# head), and the denominator is a fixed 312 TFLOP/s, an A100's bf16 peak, whatever device
# runs. The first choice lowers the numerator by a little, more for small models and less as T
# grows, since the attention term grows with it (the table: a model with learned positions only
# up to its own table, GPT-2's 1,024);
# the second makes its number a fraction of an A100, not of the device that ran the step. (A
# third: its attention term takes T as the model's `block_size`, not the length the batch ran
# at, so a run at shorter sequences is credited with the longer context's attention FLOPs: the
# table applies it, so GPT-2 at 512 tokens is priced with its 1,024-token attention term.)

# %%
nano = o.values["nanogpt_on_this_run"]
display(
    Markdown(
        f"This run's steady step in nanoGPT's terms: {si(nano['nanogpt_flops_per_s'], 'FLOP/s')} over "
        f"{si(nano['promised_flops_per_s'], 'FLOP/s')} = **{nano['nanogpt_mfu']:.3%} MFU**; the course's "
        f"`{nano['course_convention']}` MFU of the same step over this device's ceiling: "
        f"**{nano['course_mfu_vs_ceiling']:.1%}**."
    )
)
nano_table = o.tables["nanogpt_estimate_mfu"]
at_context = nano_table.seq_len == nano_table.block_size  # rows run at the model's own context
cut, over = 1 - nano_table.nanogpt_over_palm[at_context], nano_table.nanogpt_over_palm[~at_context] - 1
display(
    Markdown(
        f"At the model's own context, leaving out the position embeddings lowers the FLOPs per token by "
        f"{cut.min():.2%}–{cut.max():.2%} over these presets and lengths"
        + (
            f"; below it, the `block_size` attention term raises them by {over.min():.1%}–{over.max():.1%}."
            if len(over)
            else "."
        )
    )
)
nano_table.round(4)
# %% [markdown]
# **Hardware FLOPs under `megatron`** (the HFU numerator with recomputation) keep the source
# formulas: full recompute is Narayanan et al. 2021, Eq. 3, 96·B·s·l·h²(1 + s/6h + V/16lh)
# per iteration, which is exactly the model FLOPs plus one more forward of every layer.
# Selective recompute is Korthikanti et al. 2022, **Eq. 8 as printed**,
# 72·B·s·l·h²(1 + s/3h + V/12hl): it adds 12·s·h·l per token, the attention matmuls' forward
# *and* backward, while re-running QKᵀ and A·V once physically costs 4·s·h·l. The paper's own
# Table 5 HFU figures follow Eq. 8; the physical count gives a lower HFU:

# %%
o.tables["megatron_selective_hfu"]
# %% [markdown]
# ## 3 · Counting check: analytic FLOPs vs PyTorch's FLOP counter
#
# `torch.utils.flop_counter.FlopCounterMode` counts the FLOPs of every matmul that actually
# runs in one forward + backward of the reference model. With **naive attention** every
# matmul is visible, and the analytic count 6·N_matmul + 12·L·H·Q·T (N_matmul: weights that
# take part in a matmul — the projections and the LM head, not the embedding lookups, biases
# or norms) must match it. With **SDPA on CPU**, PyTorch has no FLOP formula for its flash
# kernel, so the attention matmuls count zero — a trap when measuring MFU with the counter.

# %%
count = o.tables["flop_count_check"]
count

# %%
exact_gap = count.loc[count.source.str.startswith("analytic"), "relative_difference_vs_counter"].item()
display(
    Markdown(
        f"Analytic vs counter: **{exact_gap:+.3%}** (target: within 0.5%). The named conventions differ "
        "from the counter by what they include: `6n` drops attention; `palm` counts every parameter "
        "as matmul work, so beside the counter it adds 6 FLOPs per token for each weight that enters no "
        "matmul (here the learned position table, the biases and the norms; the tied token embedding "
        "does enter one, as the LM head)."
    )
)

# %% [markdown]
# **Where 6N comes from.** Each weight of a linear layer takes part in one multiply-add per
# token in the forward pass: a multiply and an add, **2 FLOPs per weight**, so the forward pass
# costs **2N** FLOPs per token (N: the weights that enter a matmul). The backward pass runs two
# matmuls of the same size per weight matrix: the **input gradients** (∂L/∂x = ∂L/∂y · Wᵀ, 2N,
# passed on to the layer below; skipped where the input needs no gradient, as for a first
# linear layer fed raw features: here every projection's input comes from the embedding, which
# is trained, so none is skipped) and the **weight gradients** (∂L/∂W = xᵀ · ∂L/∂y, 2N, for the
# optimizer): **4N**. Forward + backward = **6N** per token (Kaplan et al. 2020, §2.1). The attention matmuls
# QKᵀ and A·V have no weights, so 6N misses them: they follow the same 1 : 2 rule on top. The
# FLOP counter, run on the forward and the backward pass separately, shows the rule:

# %%
o.tables["six_n_check"]

# %% [markdown]
# ## 4 · Modern blocks: what a token costs, and what each framework prints
#
# The conventions above were written for GPT blocks. The models trained now differ in four ways
# that change the count:
#
# - **grouped-query attention** (Llama 3, Mistral, Qwen3): fewer key and value heads shrink the
#   K and V projections, not the scores; QKᵀ and A·V still run once per *query* head;
# - **sliding-window and chunked attention** (Mistral 7B, Gemma 2's local layers, Llama 4): a
#   query sees at most w keys, so the score work per token stops growing with T;
# - **mixtures of experts** (Mixtral, Qwen3, DeepSeek-V3): a token runs the router, its top-k
#   routed experts and any shared ones. **Total** parameters size the memory; **active**
#   parameters price the token. 6·N over the total prices every expert for every token;
# - **multi-head latent attention** (DeepSeek-V2/V3): keys and values come up from a small
#   latent; the score contracts over 192 dimensions per head and the value over 128.
#
# The **exact count** (`flops.exact_matmul_flops_per_token(cfg, mask="causal")`, block by block
# in `analytic/blocks.py`) is 6 × each token's active matmul weights (router and output head
# included) plus 3 × the forward QKᵀ and A·V over exactly the keys each query's mask leaves. No
# kernel skips masked keys perfectly (a flash kernel skips whole blocks), so this is the model's
# work, not any kernel's. Each preset's published configuration (sources in
# `analytic/config.py`) reproduces its published parameter count; a test pins five of them.

# %%
o.tables["modern_presets"].round(3)

# %% [markdown]
# **The counter check.** `FlopCounterMode` counts the matmuls that run, and where it is wrong
# for this purpose is known from its source (`torch/utils/flop_counter.py`, torch 2.13): it
# never sees a mask. Naive attention multiplies the whole T×T; the GPU flash, efficient and
# cuDNN attention kernels are priced by their dense shapes, causal or not (the source says it
# does not account for causal attention); `flex_attention` only by a sparsity hint the caller
# sets; and the CPU flash kernel has no formula at all, so it counts zero (§3). Under activation
# checkpointing it counts the recomputed forward too: hardware FLOPs, not model FLOPs (chapter
# 04). So the check runs
# small instruments (`measure/modern_blocks.py`) built to be counted: attention one query row at
# a time over exactly the keys its mask leaves, and an MoE that gathers each expert's tokens
# (or fills each expert's padded buffer when a capacity factor is set). Their forward and
# backward, counted, must equal the analytic count to the last FLOP, and their parameters the
# analytic total. With a capacity factor that count is hardware work: the padded rows are
# multiplied and the dropped tokens are not, so it is not the model FLOPs MFU is defined on
# (those count each token's top-k experts once, `routed_rows_per_token` without a group size).
# Packed sequences under document masking attend fewer keys than the causal count here.

# %%
o.tables["modern_block_counter_check"]

# %% [markdown]
# **Six frameworks, one token.** Each framework's formula, restated from its own source at the
# commit named below (`studies/mfu/frameworks.py` has each restatement with its file), applied
# to the same configuration. Two choices move the count most: whether the score term is halved
# for the causal mask (Megatron-LM and MaxText halve it; nanoGPT, torchtitan, llm-foundry and
# OLMo-core count the full T×T), and whether a MoE is priced by its active or total parameters.
# Windows are counted by OLMo-core (without the causal half) and by MaxText only in the decoder
# blocks it has a branch for (Gemma 2/3, GPT-OSS, Llama 4: not Mistral 7B, whose window falls
# into its full causal branch); llm-foundry and nanoGPT scale the score term by d_model rather
# than heads × head width. A framework that implements no such model (nanoGPT none of these;
# llm-foundry no latent attention; torchtitan no Gemma 2 or Mistral) is shown by its formula
# applied as written: what a user who reuses it for that model would print.

# %%
framework_flops = o.tables["framework_flops"]
display(o.tables["framework_sources"])
display(framework_flops.pivot(index="preset", columns="framework", values="vs_exact").round(3))
o.tables["framework_departures"].round(3)

# %%
fig = figures.plot_framework_departures(framework_flops)
plots.save_figure(fig, out, "framework_flops")

# %% [markdown]
# **The same run, six reports.** Take one H100 SXM run whose exact model work is
# `studies/mfu/frameworks.py`'s `SAME_RUN_EXACT_MFU` of the BF16 dense peak (an assumed run: every framework's figure
# scales with it, the ratios do not). Megatron-LM and MaxText print TFLOP/s per GPU and no MFU;
# the others divide by their own peak constant. nanoGPT divides by an A100's 312 TFLOP/s on any
# GPU, and its formula, applied to a MoE's parameters, counts every expert:

# %%
mfu_view = framework_flops.pivot(index="preset", columns="framework", values="printed_mfu")
tflops_view = framework_flops.pivot(index="preset", columns="framework", values="printed_TFLOPs_per_gpu")
display(
    Markdown(
        f"Exact MFU of the run: **{o.values['same_run_exact_mfu']:.0%}**. MFU each framework prints "
        "(blank: it prints no MFU):"
    )
)
display(mfu_view.dropna(axis=1, how="all").round(3))
display(Markdown("TFLOP/s per GPU each framework prints for the same run:"))
tflops_view.round(0)

# %% [markdown]
# ## 5 · The denominator: datasheet peak vs measured ceiling
#
# A datasheet peak is a clock-rate product no real kernel reaches. The **measured matmul
# ceiling** — the best median FLOP/s over a sweep of square matmuls, in the spirit of stas00's
# MAMF finder — is what the device really does at its best. A CPU's datasheet prints no FLOP/s,
# so the course builds the same clock-rate product from the ISA (`devices.cpu_peak_flops_per_s`:
# cores × clock × FMA units per core × lanes × 2, fp32) and sets the ceiling against it; the
# FMA units per core are an assumption (2 on every x86 server core since Haswell and Zen 2),
# shown with one unit as well, and the clock is the one the kernel reports (a core that turbos
# higher can beat the "peak"; the ceiling's implied clock says by how much). The FMA width comes
# from the ISA flags and the vendor's family and model numbers; a virtual machine may report a
# generic model, so the width is checked against the ceiling, since no kernel beats the true
# peak (`devices.cpu_fma_width_checked`: a ceiling that would need a clock no such core reaches
# means the wider pipes). The ceiling itself is the best *measured* square matmul, not a bound:
# another shape or BLAS path can pass it. Two vCPUs may be two cores or two SMT threads of one
# core, and a hypervisor's topology does not say which: one 256-bit core with two FMA units gives
# the same product as two 128-bit cores. The same matmul on one thread and on two tells them
# apart (about 2× for two cores, 1.0–1.3× for two threads of one). A peak that stays below the
# ceiling even then is not an upper bound: the course drops it as a denominator, and every MFU
# below is over the measured ceiling (the MFU over the true, unknown peak is at most that).
# Memory bandwidth (a copy: bytes read + written, of buffers several times the last-level cache so that DRAM
# serves it) comes with it. Both are this machine's *calibration*, measured once and read by
# every study (study 03's roofline uses the same numbers).

# %%
ceiling = o.tables["matmul_ceiling"]
sheet = o.values["datasheet_peak"]
isa_lines = (
    f"\n* ceiling ÷ peak: **{records['ceiling']['best_flops_per_s'] / sheet['flops_per_s']:.0%}**; with one FMA "
    f"unit per core the peak would be {si(sheet['one_fma_unit_flops_per_s'], 'FLOP/s')}; the ceiling "
    f"implies a sustained clock of {sheet['clock_implied_by_ceiling_hz'] / 1e9:.2f} GHz at two units "
    f"(reported {sheet['clock_hz'] / 1e9:.2f} GHz)"
    + (
        "; the ceiling is above the peak, so the peak is **not used as a denominator**: MFU below is over "
        "the ceiling"
        if o.values["breakdown"]["peak_below_ceiling_flops_per_s"]
        else ""
    )
    if sheet.get("cores")
    else ""
)
threads = records.get("thread_scaling")
if threads:
    one, many = threads["flops_per_s"]
    isa_lines += (
        f"\n* the {threads['size']}³ matmul on 1 thread: {si(one, 'FLOP/s')}, on {threads['threads'][1]}: "
        f"{si(many, 'FLOP/s')} (**{many / one:.2f}×**): "
        + (
            "two threads of one core (SMT), so the peak's factors are one core's, its product unchanged"
            if many / one < 1.4
            else "separate cores"
        )
    )
display(
    Markdown(
        calibration.describe(records) + f"\n* {time_split.peak_label(records)}: "
        f"**{si(sheet['flops_per_s'], 'FLOP/s') if sheet['flops_per_s'] else 'none'}** "
        f"({sheet['source'] or sheet['why_none']})" + isa_lines
    )
)
ceiling

# %% [markdown]
# Where the gap between datasheet and ceiling is published: the best single dense GEMM measured
# on each accelerator (stas00's MAMF finder) against its dense datasheet peak. Even the best
# GEMM of a well-fed GPU stays well below the peak, and a training step's GEMMs run below that
# best one. Vendors' tables often lead with the *with-sparsity* figure (2:4 structured
# sparsity, twice the dense peak): an MFU over it is halved before anything is measured.

# %%
mamf = o.tables["published_mamf"]
display(Markdown(analysis.published_mamf_text(mamf)))
mamf[
    [
        "device",
        "dtype",
        "datasheet_dense_peak_flops_per_s",
        "mamf_flops_per_s",
        "mamf_over_peak",
        "mamf_measured_on_device",
        "mamf_source",
    ]
]

# %% [markdown]
# **The denominator under FP8 and FP4.** A step trained "in FP8" runs the blocks' linear layers in
# FP8 and the attention core and output head in BF16, so no single peak fits. torchtitan prints
# no MFU when Float8 layers are present (its issue #560), Megatron-LM prints TFLOP/s only. Three
# denominators are in use; the course reports all three, labelled (`analytic/precision.py`):
#
# - **BF16-equivalent**: every FLOP against the BF16 dense peak. It passes 100% once enough work
#   runs at a precision faster than BF16, which is why it cannot be read as a utilisation;
# - **low-precision peak**: every FLOP against the FP8 (or FP4) dense peak. It understates: the
#   BF16 part could never run there;
# - **precision-aware** (ours): the time a device at its dense peaks would need, each dtype's
#   FLOPs at that dtype's peak, over the time taken. It is the ordinary MFU when one precision
#   runs everything and cannot pass 100%. It is a utilisation *of the recipe*, not a speed:
#   a recipe that moves work to a faster precision raises its own ceiling, so a faster run can
#   read lower (below, NVFP4 at 3,594 TFLOP/s reads under FP8 at 2,615). Compare runs by
#   tokens/s or model TFLOP/s, which the table prints beside it.
#
# The worked example is a published run: Llama 3.1 405B pre-trained on 256 GB300 GPUs in NVFP4,
# FP8 and MXFP8 (Megatron-Bridge's performance summary). Its tokens/s times the exact count of a
# token reproduces the model TFLOP/s it publishes; the GB300's dense peaks come from
# `devices.yaml`, where BF16 and FP8 rest on third-party copies of NVIDIA's rack page (whose
# figures are with sparsity, halved here); a Hot Chips table prints per-package figures twice
# these, and the sensitivity shows what reading those as dense would do. The BF16 share is the
# published recipe's (attention and output head in BF16, no BF16 blocks); NVIDIA's NVFP4 blog
# keeps the last four blocks in BF16, the sensitivity's last row:

# %%
display(o.tables["low_precision_mfu"].round(3))
o.tables["low_precision_sensitivity"][
    ["case", "precision", "bf16_equivalent_mfu", "low_precision_peak_mfu", "precision_aware_mfu"]
].round(3)

# %% [markdown]
# ## 6 · A measured run: where the step time goes (B2)
#
# The reference GPT trains on synthetic tokens. Each step is timed in three phases (device
# synchronised before each reading): **data** (next batch to the device), **compute**
# (forward + backward + optimizer) and **other** (reading the loss back with `loss.item()`).
# The time before the first step (building the model and its optimizer) is start-up; what is
# left of each step's period (the loop's own bookkeeping) is untimed loop overhead. The first
# steps are warm-up.

# %%
fig = figures.plot_step_timeline(records, o.values["breakdown"])
plots.save_figure(fig, out, "step_timeline")
tr = records["train"]
assert tr["losses_finite"], "training produced a non-finite loss"
print(f"correctness gate: first loss {tr['initial_loss']:.3f} vs ln(V) = {tr['expected_initial_loss']:.3f}")

# %%
bd = o.values["breakdown"]
o.tables["time_split"]

# %% [markdown]
# Article B §1.2 draws the step as a pie of useful compute and four losses: 算子效率低 (slow
# operators), 通信等待 (communication wait), 数据等待 (data wait) and 调度浪费 (scheduling waste).
# Compute is not a loss: its useful part is the model FLOPs (the mask-aware exact count) at the
# matmul ceiling timed in the training process, the rest of it slow operators
# (`verdicts.b2_compute_split`, the waterfall's "slow operators" bar in seconds). This chapter
# measures the split but does not judge it: one process has no communication, and synthetic
# in-memory batches barely wait, so no run of it could show more than two or three of the four
# losses whatever the sentence's truth. A test that cannot fail is
# not a verdict; B2's four-way split is judged in chapter 07, on a two-rank job that has every
# category. The table above is the measurement; the waterfalls below draw it.

# %% [markdown]
# Global MFU uses the whole job's wall clock; local MFU only the compute time, summed over
# every step, warm-up included; the steady-state figures use the median step after warm-up.
# Local can therefore read *below* steady-state: slow warm-up steps (and any slow stretch of
# the run) weigh on a sum but not on a median. The steady-state local figure (the median
# compute time of the measured steps) is shown beside it. Each is shown against every
# denominator this device has, and under every convention. The headline is the mask-aware exact
# count (the model's work: a causal query counts only the keys it sees); `palm` (6N over every
# parameter plus the full T×T attention, the count PaLM and FlashAttention-2 report their MFUs in)
# follows it, so that this run reads beside the published table of §7. The denominator is the
# ceiling as the training process meets it: the calibration's best matmul timed again in this
# process before the job, between its steps and after it (off the job's clock). A ceiling measured
# apart from the run (the calibration, read from its cache) can be off by more than the steps'
# spread; a fresh process timed just before the job tells a device that is slower than when it
# was calibrated (the fresh process reads low too) from a process that is slower than a fresh one.

# %%
by_conv = o.tables["mfu_by_convention"]
headline_over_count = count.loc[
    count.source.str.startswith(f"convention {bd['convention']}"), "relative_difference_vs_counter"
].iloc[0]
over_exact = analysis.headline_over_exact(records, bd["convention"])
drift = run_checks.ceiling_drift(records, bd)
bd_exact = time_split.exact_breakdown(records, bd)  # the model's work: the mask-aware exact count
denominator = (
    "of the ceiling timed in the training process"
    if bd["ceiling_source"] == "in-process"
    else "of the measured ceiling"
)
display(
    Markdown(
        f"By the mask-aware exact count (the model's work, §4): steady-state "
        f"**{bd_exact['steady_mfu_vs_ceiling']:.1%}**, global **{bd_exact['global_mfu_vs_ceiling']:.1%}** "
        f"{denominator} ({si(bd['ceiling_flops_per_s'], 'FLOP/s')}). "
        f"By `{bd['convention']}` (the count of the published table in §7): global MFU {bd['global_mfu_vs_ceiling']:.1%}, local "
        f"{bd['local_mfu_vs_ceiling']:.1%} (all steps), steady-state {bd['steady_mfu_vs_ceiling']:.1%} "
        f"(steady-state local {bd['steady_local_mfu_vs_ceiling']:.1%})"
        + (
            f"; steady-state **{bd['steady_mfu_vs_datasheet']:.1%}** of the {time_split.peak_label(records)}"
            if bd["datasheet_flops_per_s"]
            else ""
        )
        + f". Steady step {bd['steady_step_s'] * 1e3:.1f} ms (IQR {(bd['steady_step_q3_s'] - bd['steady_step_q1_s']) * 1e3:.1f} ms, "
        f"n = {tr['steps']}), {bd['steady_tokens_per_s']:,.0f} tokens/s."
        + (
            f" The {drift['size']}³ matmul read {si(drift['in_process_lo_flops_per_s'], 'FLOP/s')}–"
            f"{si(drift['in_process_hi_flops_per_s'], 'FLOP/s')} over its {drift['probes']} timings in this "
            f"process ({drift['drift_over_run']:+.1%} from the first to the last); with the steps' middle half "
            f"and that spread together, `{bd['convention']}` steady-state MFU lies in "
            f"**{drift['steady_mfu_lo']:.1%}–{drift['steady_mfu_hi']:.1%}** (the headline's precision on this run)."
            + (
                f" A fresh process just before the job read {si(drift['fresh_process_flops_per_s'], 'FLOP/s')}, "
                f"{drift['fresh_over_calibrated']:.3f}× the calibration's {si(drift['calibrated_flops_per_s'], 'FLOP/s')} "
                f"(cached, timed {drift['calibrated_at'] or 'at another time'}); this process's median is "
                f"{drift['in_process_over_calibrated']:.3f}× it"
                if drift["fresh_process_flops_per_s"]
                else ""
            )
            + (
                (
                    ": the machine itself runs slower than when it was calibrated (a slower clock, a busier "
                    "host, or another virtual machine of the same name), not this process"
                    if drift["fresh_over_calibrated"] and drift["fresh_over_calibrated"] < 0.95
                    else ": the fresh process keeps the calibration's pace, so this process is the slower one"
                )
                + f". Over the calibration, steady-state MFU would read {drift['steady_mfu_vs_calibration']:.1%}: "
                "a denominator timed on another day would have charged the machine's own slowdown to the "
                "step's operators. The waterfalls below start at the ceiling this process met."
                if drift["in_process_over_calibrated"] < 0.95
                else "."
            )
            if drift
            else ""
        )
        + (
            f" `{bd['convention']}` counts the embeddings as matmul work: {headline_over_count:+.1%} over the "
            f"dense-shape count (FlopCounterMode: every matmul as run, the masked half of causal attention "
            f"included), where steady-state is {bd['steady_mfu_vs_ceiling'] / (1 + headline_over_count):.1%}; "
            f"by the mask-aware exact count (§4: a causal query counts only the keys it sees) it is "
            f"{bd_exact['steady_mfu_vs_ceiling']:.1%}."
            if abs(headline_over_count) >= 0.001
            else ""
        )
    )
)
by_conv

# %% [markdown]
# **Why global and steady-state MFU differ.** Global MFU divides the FLOPs of *every* step
# by the whole wall clock: the *mean* time per step, warm-up included, with start-up spread
# over it. Steady-state MFU uses the *median* of the measured steps only. Three factors
# separate them, and their product is exactly global / steady:
#
# * start-up before the first step (building the model and optimizer) only ever pulls global
#   below steady;
# * warm-up steps pull it below when they are slower than the measured steps (first-touch
#   allocation, caches, and on a GPU compilation and autotuning) and lift it above when they
#   are faster (on a CPU, a machine that slows down during the run);
# * the measured steps' median against their mean: a few slow steps put the median below the
#   mean (global below steady), a few fast ones above it.
#
# The table gives each factor for this run, and the sentence under it names which way global
# went and the factor that moved it most:

# %%
gs = o.tables["global_vs_steady"]
display(gs)
display(Markdown(time_split.global_vs_steady_note(gs)))
display(Markdown(time_split.at_scale_goodput_note(gs, bd["steady_mfu_vs_ceiling"])))

# %% [markdown]
# **Global and local MFU pulled apart.** Article B's point in §1.1 is that the gap between the two
# is where communication, IO and scheduling waits sit (这两个数字的天壤之别，恰恰就是通信、IO和调度浪费所在的地方).
# This run barely waits (its data phase is a synthetic batch in memory), so its global and local
# figures sit close. The same steps run again below, once as they are and once behind a loader
# that sleeps half of a step's median compute time before each batch (`wait_over_compute`): local
# MFU leaves the wait out by definition, so the wait cannot move it (it moves only with the
# compute itself, which drifts on a shared VM: the sentence under the table says by how much);
# global MFU falls by the wait's share of the wall clock. The ratio global ÷ local is the busy
# share of the wall clock, whatever the compute did. That is an identity (true by construction of
# the two definitions); the run
# illustrates it with a sleep standing for a slow loader (one process, so no communication): what
# the two conventions do, not how large the gap is on a cluster.

# %%
waits = o.tables.get("waits_demo")
if waits is None:
    print("no waits demo in these measurements (wait_steps = 0, or measured before it existed)")
else:
    display(waits.round(4))
    quiet, slow = waits.iloc[0], waits.iloc[-1]
    display(
        Markdown(
            f"With a {slow.loader_sleep_ms:.0f} ms sleep per batch, data waits take "
            f"{slow.data_share_of_wall:.0%} of the wall clock: global MFU {quiet.global_mfu:.1%} → "
            f"{slow.global_mfu:.1%}, local {quiet.local_mfu:.1%} → {slow.local_mfu:.1%} (global over local "
            f"{quiet.global_over_local:.2f} → {slow.global_over_local:.2f}, against a busy share of "
            f"{1 - slow.data_share_of_wall:.2f}). Local MFU moved {slow.local_mfu / quiet.local_mfu - 1:+.0%}: "
            "the compute's own drift between the two runs (and a sleeping loader's process beside "
            "it), not the wait, which its denominator leaves out."
        )
    )

# %%
fig = figures.plot_waterfall(records, bd_exact)  # B2's count
plots.save_figure(fig, out, "job_waterfall")
# %% [markdown]
# Both waterfalls count the model's work by the mask-aware exact count, as B2's split above does
# (the headline's `palm` would credit the masked half of the score matrix as useful work).
# This job-level waterfall starts at the top denominator this device has (a GPU's datasheet
# peak, a CPU's ISA peak where it is at least the ceiling, else the matmul ceiling timed in the
# training process; a calibration from another day is no loss of this job, and the text above
# gives its gap). **Slow operators** is the gap between the best square matmul as this process
# met it and the local FLOP/s: what the model's mix of smaller matmuls, softmax, norms,
# GELU and the optimizer achieves while computing. The drop from local to global is the time
# outside forward+backward+optimizer, split in proportion to its parts: **communication
# wait** (none: one process), **data wait**, **start-up + loss read-back** (building the model
# and optimizer, `loss.item()`) and **untimed loop overhead**. The last two are what this run
# has of B2's fourth loss, scheduling waste; B2's synchronous checkpoints, throttled cards and
# poor CPU pinning do not occur in it. The
# multi-process studies (02 overlap, 05 buckets) and the dataloader study (06) fill in the
# other bars on machines where they matter; study 07 (step anatomy) measures them all in one job.
#
# ## 7 · Inside the step: an operator profile
#
# "Slow operators" above is one residual. To split it, `torch.profiler` records a few more
# steps of the same training step after the timed run (`mfulab.measure.opprofile`). Every op the
# step runs (on a GPU: every kernel) goes into a category by its name — matmul, attention core,
# norm / elementwise, optimizer, communication, data / host-to-device — by the rules below (first
# match wins; a *context* rule claims everything inside the op, so the `aten::add_` inside
# `Optimizer.step` is optimizer time; an op no rule names is **other ops**, not folded into a big
# category). **Idle** is the step's wall time outside every op — on a CPU that is Python and
# dispatch time between ops, not an idle device (on a GPU: the device idle). Since idle is what
# the ops leave, the categories sum to the step's duration in the trace by construction (an
# identity, not a check). What can differ is a profiled step against a timed one: the line below
# the trace compares them.
# The profiler's own overhead (about 2 µs per recorded op) lands most on the categories with many
# small ops — the optimizer here — so their shares are upper bounds.

# %%
with pd.option_context("display.max_colwidth", 90):
    display(opprofile.rules_table())

# %%
trace_path = results.save_trace(out, records["op_profile"]["trace"], from_dir=from_dir)
tr_note = records["op_profile"]["trace"]
display(
    Markdown(
        (
            f"**The trace**: `{trace_path}` in this study's results folder "
            f"({tr_note['bytes'] / 1e3:.0f} kB gzipped"
            + (f"; trimmed to the cap: {tr_note['dropped']} dropped" if tr_note["trimmed"] else "")
            + "). Open it at [ui.perfetto.dev](https://ui.perfetto.dev) (*Open trace file*; the `.json.gz` "
            "loads as is) or in Chrome at `chrome://tracing` (*Load*). Each `mfulab.step#k` slice on the "
            "main thread's track is one profiled step, the ops nested under it; the `mfulab.profiler-warmup` "
            "slice before them is a warm-up step the split leaves out."
        )
        if trace_path
        else "The trace file is not in this render (measured elsewhere without its `traces/` folder)."
    )
)
check = o.values["profile_check"]
print(
    f"profiled step {check['profiled_step_s'] * 1e3:.1f} ms vs the timed run's steady step "
    f"{check['steady_step_s'] * 1e3:.1f} ms: {check['profiled_over_steady'] - 1:+.1%} (the profiler's overhead "
    "and the machine's speed between the two phases; the waterfall below uses shares, not seconds)"
)
cats = o.tables["operator_categories"].set_index("category")
if cats.loc[["matmul", "attention core"], "share_of_ceiling"].notna().all():
    display(
        Markdown(
            "The two categories that do the model's work (mask-aware exact count): the GEMMs reach "
            f"**{cats.loc['matmul', 'share_of_ceiling']:.0%}** of the ceiling this process met and the attention core "
            f"**{cats.loc['attention core', 'share_of_ceiling']:.0%}**: attention is "
            f"{cats.loc['attention core', 'model_flops_per_step'] / cats.model_flops_per_step.sum():.1%} of the "
            f"FLOPs and {cats.loc['attention core', 'share_of_profiled_steps']:.0%} of the time; norms, "
            "elementwise ops and the optimizer do none of the model's FLOPs and take the rest."
        )
    )
o.tables["operator_categories"]

# %% [markdown]
# **From this CPU to a GPU.** The shares above are this CPU's, whose matmul rate is only a few
# FLOPs per byte of memory bandwidth; an A100 does about 150. The same model and batch priced by
# the course's one step model (`analytic.step.step_time`, chapters 08–09; bf16 on one GPU,
# standard and fused attention) shows how the split moves: a projection, not a measurement
# (`operator_split.gpu_projection`; each column's four terms sum to 1):

# %%
o.tables["gpu_projection"].round(3)

# %%
fig = figures.plot_operator_steps(records)
plots.save_figure(fig, out, "operator_steps")

# %% [markdown]
# The ops with the most self time (the kernel breakdown; on a GPU with HolisticTraceAnalysis
# installed, its temporal and kernel breakdowns are in `measurements.json` beside this one):

# %%
o.tables["top_ops"]

# %% [markdown]
# **The waterfall from the measured categories.** The ideal step is the model FLOPs at the
# measured ceiling; the gap to the steady step is split by where its time went: the matmul +
# attention time beyond the ideal step, then each other category's whole time (shares of the
# profiled steps applied to the timed steady step: a profiled step's seconds differ from a timed
# one's, by the profiler's overhead and, on a shared box, by the machine's speed between the two
# phases; the profile check above gives the ratio, so the shares are used, not the seconds).
# Steady → global is the rest of the job: start-up, warm-up, the spread of the steps.

# %%
fig = figures.plot_operator_waterfall(records, bd_exact)
plots.save_figure(fig, out, "waterfall")

# %% [markdown]
# **The same step at other shapes.** One configuration cannot show how the losses move with the
# shapes, so the step is profiled again at other widths (at the run's sequence length) and
# sequence lengths (at the run's width), the tokens per step fixed (`bench.shape_sweep`,
# `shape_sweep.sweep_table`). Narrower layers make smaller GEMMs, further from the best square
# matmul, and leave the fixed per-op costs (norms, elementwise ops, the optimizer) a larger share;
# a longer sequence moves work into the attention core, whose share of the time is measured here,
# beside its share of the work (§2 only counts it). Each shape's step is a profiled step (within
# a few per cent of a timed one, either way: the check above); a CPU shows the shapes' effect, not a GPU's
# size of it: no tensor cores, no HBM, no launch gaps. The ceiling is the best square matmul of
# the calibration's sweep timed in this process, not a bound: the widest layers' rectangular
# GEMMs can pass it.

# %%
sweep = o.tables.get("shape_sweep")
if sweep is None:
    print(
        "no shape sweep in these measurements (empty sweep_d_models and sweep_seq_lens, or measured before it)"
    )
else:
    fig = figures.plot_shape_sweep(sweep, d_model=cfg.d_model, seq_len=cfg.seq_len)
    plots.save_figure(fig, out, "shape_sweep")
    display(sweep.round(3))

# %% [markdown]
# **Published MFU, each with its convention.** An MFU compares only with one counted the same
# way: which FLOPs (model or hardware, attention included or not) over which peak (the dense
# datasheet peak; a CPU run's row is over its ISA peak, or over the measured ceiling where the
# peak is missing or below the ceiling, and is not comparable with the GPU rows either way).

# %%
published = o.tables["published_mfu"]
with pd.option_context("display.max_colwidth", None):
    display(published)

# %% [markdown]
# ## 8 · The articles' arithmetic
#
# **A19** (article A §8): "13B model, global batch 32, seq 4096 → 131,072 tokens; total FLOPs
# ≈ 6N × 3 × tokens ≈ 3.06e16; 2.4 s/step on 8 cards of 3.2e14 FLOP/s → MFU ≈ 0.497".

# %%
o.tables["a19_arithmetic"]

# %% [markdown]
# The error sits in the article's premise: its text takes the forward pass as ≈ 6N per token
# and the backward as twice that, hence "6N × 3". The forward is 2N; 6N already counts the
# forward pass (2N) and the backward pass (4N), so the extra ×3 triples the work. Even with that error, 3.06e16 / (2.56e15 × 2.4) is about 5, not 0.497 — the article's
# division is off by ten. With the correct 6N the stated inputs imply an MFU above 1, which is
# impossible: the step time, the card count or the peak must be different from what is stated
# (on 32 cards, the A4 setting, the same numbers give ≈ 42%).
#
# **B15** (article B §5.2): the case study's steps, each attributed to its loss category:

# %%
o.tables["b15_attribution"]

# %% [markdown]
# The sentence "the gain comes mainly from communication overlap and data IO" speaks of MFU
# points (从43%到52%，九个百分点的提升): at a fixed batch MFU ∝ 1 / step time, so each step's
# points are 1/after − 1/before in B1's arithmetic, and a second saved late in the ladder (a
# shorter step) is worth more than one saved early. It needs a category for the NCCL step, and
# the article supports two. Its words say "通信重叠" (communication *overlap*): its step 2 (the DDP
# buckets) is the one it says lets backward and communication overlap more fully, while
# GPUDirect RDMA and buffer sizes (step 3) raise bandwidth and add no overlap. But article B files
# NCCL tuning under §3's communication optimisation (通信优化), so the NCCL step may count as
# communication too. Every step time is given to 0.1 s, so each share is also taken with every
# step time anywhere within ±0.05 s (`share_lo_rounding`, `share_hi_rounding`); a reading decides
# only where its whole range lies on one side of half. The table gives each reading's share of the
# points (and of the seconds, beside it); the sentence is not checkable on the article's own numbers
# where the readings disagree or cannot tell (`b15.b15_verdict`). On either reading the largest
# single step is SDPA + TF32 (0.8 s), which §5.2 itself calls "这一步收益最大" (the largest gain):

# %%
o.tables["b15_readings"]

# %% [markdown]
# **B1's "local MFU ... 80%"** (§1.1) read both ways. §1.1 is a hypothetical on the same 64
# A100s, 7B model and ~10 s step as the case study, so the rest is borrowed from §5.1 (TP 4,
# 512 × 4096 tokens, "注意力计算用的是标准实现", the standard attention implementation): assumed
# configurations. As local MFU (§1.1's own definition: the article's 6 × 7e9 FLOPs per token over
# the compute stream's busy time at the peak) no model is needed for a bound: each kernel takes at
# least the larger of its FLOPs at the A100's datasheet peak (no kernel beats it; MAMF, the best
# measured GEMM, gives a tighter figure beside it, not a bound) and its bytes at the datasheet
# bandwidth. Under standard attention the T×T score matrices make 11 passes through HBM per layer
# and head (FlashAttention's Algorithm 0): six are the attention GEMMs' own operands, five the
# softmax kernels' (`article_arithmetic.b1_local_mfu_bound`). The fused kernel of §5.2's first change is the last
# row, a sensitivity. A bound can rule 80% out, never in:

# %%
o.tables["b1_local_mfu_bound"].round(3)

# %% [markdown]
# As occupancy (the sentence's 占用率: the share of the step the compute stream is busy) a bound
# does not help; the step model at the same configuration (every GEMM at MAMF) gives the busy
# share of the modelled step and, beside it, the local MFU it implies. Its margin for a modelled
# figure against an article's is ±52%, so these figures cannot decide the 80% either way:

# %%
o.tables["b1_local_mfu"].round(3)

# %% [markdown]
# The same change is claim B9 (study 02), whose text says it made the step "4% faster" and
# lifted global MFU "from 48% to 52%", on "100G HDR" InfiniBand at 12.5 GB/s. Recomputed:

# %%
b9_text = o.tables["b9_text_checks"]
display(b9_text)
display(Markdown(article_arithmetic.b9_text_note(b9_text)))

# %% [markdown]
# ## Claims
#
# Verdict words (the rule is `docs/claims.md`, enforced by `verdicts.label`):
#
# * *confirmed* / *refuted*: a measurement in the claim's regime, a cited figure, a
#   specification or the article's own arithmetic decides; an exact count or an identity can
#   refute but only *shows* what it confirms;
# * *(analysis)*: an analysis decides, at the article's configuration or at assumed ones (the
#   basis says which); *analytic only* when it cannot (a sensitivity row reverses it, a
#   reading does, or the answer lies inside the model's own error margin): the course's
#   *inconclusive* for a row whose evidence is an analysis at scale;
# * *shown* / *not shown*: a mechanism in a toy regime, or a property true by construction;
# * *inconclusive on this machine*: the regime is out of reach and no analysis decides;
# * *not checkable*: nothing can be tested, or two readings of the sentence disagree.
#
# The rows:
#
# * arithmetic claims are confirmed when the recomputation matches within 1% (an MFU stated in
#   whole percent: within half a point, its rounding); B1's first row checks its FLOPs and MFU
#   figures, the "about 5 s" ideal step a note;
# * "many jobs at 35–50%" is not checkable (no fleet publishes its jobs' MFU);
# * the "time share" gloss and "the gap is the waits" are read by the article's own definitions
#   (its formula two paragraphs on; local MFU one paragraph earlier): identities, so *shown (by
#   construction)*, with the occupancy reading and the article's implied waits as remarks;
# * "local MFU may show the compute pipeline itself 80% busy" is read as local MFU and as
#   occupancy (占用率) at the configuration borrowed from §5.1 (assumed configurations), a
#   possibility over both readings (`verdicts.any_scenario`): local MFU by the bound above,
#   occupancy by the step model, which decides only beyond its margin;
# * B2's `nvidia-smi dmon` diagnosis is judged on NVML's documented definitions of the two
#   columns and NCCL's collectives running as kernels (documented specification): refuted when a
#   loss the case study works on reads like compute on both columns;
# * B15's "mainly" is more than half of the MFU points gained (∝ 1 / step time), under each
#   reading of the NCCL step, each step time anywhere within its ±0.05 s rounding
#   (`b15.share_range`); readings that disagree or cannot tell leave it not checkable.
#
# Arithmetic verdicts are deterministic.

# %%
claim_list = o.claims
verdicts.publish_claims(out, o.claims, o.metrics)  # tables/claims.csv: the full table
display(Markdown(verdicts.claims_markdown(o.claims)))

display(Markdown(stability_note(out)))
# %% [markdown]
# ## What this study showed

# %%
display(
    Markdown(
        "\n".join(
            [
                f"* On **{records['device_name']}** the reference model ({p.preset}, "
                f"{records['n_params'] / 1e6:.1f} M parameters) reached "
                f"**{bd_exact['steady_mfu_vs_ceiling']:.0%}** {denominator} in steady state "
                f"and **{bd_exact['global_mfu_vs_ceiling']:.0%}** over the whole job by the mask-aware exact "
                f"count ({bd['steady_mfu_vs_ceiling']:.0%} and {bd['global_mfu_vs_ceiling']:.0%} by "
                f"`{bd['convention']}`, the count of PaLM and FlashAttention-2); "
                f"that ceiling is {si(bd['ceiling_flops_per_s'], 'FLOP/s')}: fractions of a measured "
                "ceiling (MAMF-relative), not MFUs against a datasheet peak like the published ones of §7"
                + (
                    f". With the steps' spread and the ceiling's spread over its timings, the `palm` "
                    f"steady-state figure lies in {drift['steady_mfu_lo']:.0%}–{drift['steady_mfu_hi']:.0%}"
                    + (
                        f"; against the cached calibration (this process met "
                        f"{drift['in_process_over_calibrated']:.2f}× of it) it would read "
                        f"{drift['steady_mfu_vs_calibration']:.0%}"
                        if drift["in_process_over_calibrated"] < 0.95
                        else ""
                    )
                    if drift
                    else ""
                )
                + ".",
                f"* The FLOPs convention alone moves the reported MFU from {by_conv.mfu_vs_ceiling.min():.0%} to "
                f"{by_conv.mfu_vs_ceiling.max():.0%} for this same run; at {conv.seq_len.max():,} tokens attention is "
                f"{conv[(conv.convention == 'palm') & (conv.seq_len == conv.seq_len.max())].attention_share.max():.0%} of the FLOPs "
                "for the narrowest preset above, which 6N ignores.",
                "* Inside a profiled step: "
                + ", ".join(
                    f"{c} {v:.0%}"
                    for c, v in o.tables["operator_categories"]
                    .set_index("category")
                    .share_of_profiled_steps.sort_values(ascending=False)
                    .items()
                    if v >= 0.005
                )
                + " of the wall time (torch.profiler; trace in `traces/`)."
                + (
                    " At other shapes (the same tokens per step): MFU "
                    + " → ".join(
                        f"{r.mfu_exact:.0%} (d_model {r.d_model})"
                        for r in sweep[sweep.seq_len == cfg.seq_len].sort_values("d_model").itertuples()
                    )
                    + "; the attention core's share of the time "
                    + " → ".join(
                        f"{r.attention_share_of_time:.0%} (T {r.seq_len})"
                        for r in sweep[sweep.d_model == cfg.d_model].sort_values("seq_len").itertuples()
                    )
                    + "."
                    if sweep is not None
                    else ""
                ),
                f"* The analytic FLOP count matches PyTorch's counter within {abs(exact_gap):.3%}; "
                + (
                    "SDPA's flash kernel on CPU is invisible to the counter."
                    if records["device"] == "cpu"
                    else "the counter has formulas for SDPA's CUDA kernels, so attention is in both counts."
                ),
                summary_line(claim_list),
            ]
        )
    )
)
