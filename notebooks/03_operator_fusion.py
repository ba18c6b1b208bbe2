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
# # 03 · Operator fusion: bytes moved, kernels launched, and what `torch.compile` buys
#
# Most operators in a transformer layer — LayerNorm, residual adds, dropout, activations —
# do about one FLOP per byte they touch. They are **memory-bound**: their time is the bytes
# they read and write divided by the memory bandwidth. Fusing several of them into one kernel
# removes the round trips through memory between them, and the launches. This notebook
#
# 1. places kernels on this device's **roofline**, built from its *measured* ceilings;
# 2. predicts and measures the fusion of LayerNorm + residual add + dropout (claim **A7**);
# 3. measures attention variants vs sequence length — time and exact saved memory (**A8**, **B3**);
# 4. scales A8 to the article's 7B setting with the memory model;
# 5. compiles the reference model's training step (**B5**) and compares matmul dtypes (**B4**).

# %% tags=["parameters"]
params = {}  # the profile's values (papermill injects them); empty: the defaults, the laptop profile
out_dir = ""  # set by the runner; empty: scratch/fusion
from_dir = ""  # analyse measurements from this folder instead of measuring

# %%
import pandas as pd
from IPython.display import Markdown, display

from mfulab import calibration, plots, results
from mfulab.notebook import setup, stability_note
from mfulab.studies.fusion import analysis, figures
from mfulab.verdicts import summary_line

out, p, records = setup("fusion", params, out_dir=out_dir, from_dir=from_dir)
print(
    f"device: {records['device_name']} ({records['device']}), {records['num_threads']} threads, "
    f"torch {records['torch']}"
)

# %% [markdown]
# ## 1 · Why small ops are memory-bound: the roofline
#
# A kernel's time is at least max(FLOPs / peak, bytes / bandwidth). The **ridge point**
# peak / bandwidth (FLOPs per byte) separates memory-bound kernels (left) from compute-bound
# ones (right). Both ceilings are this machine's calibration (shared with study 01): the best
# matmul and a copy of buffers several times the last-level cache.

# %%
display(Markdown(calibration.describe(records)))
fig = figures.plot_roofline(records)
plots.save_figure(fig, out, "roofline")
results.save_table(out, "roofline_points", analysis.roofline_points(records))

# %% [markdown]
# ## 2 · LayerNorm + residual + dropout (A7)
#
# `h = x + dropout(a); y = layer_norm(h)`. Unfused, three kernels each read and write the
# whole tensor: **7·N·e + N** bytes (e: element size; N: a 1-byte dropout mask). Fused, one
# pass reads `x` and `a` and writes `h`, `y` and the mask: **4·N·e + N**. Memory-bound, the
# predicted speed-up is the ratio of the two. `torch.compile` (inductor) generates the fused
# kernel; a hand-written Triton kernel joins on CUDA. The correctness gate compares outputs
# with eager at p = 0 (the compiled dropout draws other random numbers) and checks the
# dropped fraction at p > 0.

# %%
ln = analysis.ln_table(records)
results.save_table(out, "ln_fusion", ln)
assert ln.correct.all(), "an implementation disagrees with eager"
if records["ln"]["triton_skipped"]:
    print("Triton kernel skipped:", records["ln"]["triton_skipped"])
print(f"torch.compile of the LN kernel (both dropout settings) took {records['ln']['compile_s']:.1f} s")
ln[
    [
        "impl",
        "dropout_p",
        "correct",
        "median_s",
        "q1_s",
        "q3_s",
        "n",
        "min_bytes",
        "achieved_bytes_per_s",
        "fraction_of_measured_bandwidth",
        "kernels",
    ]
]

# %%
comparisons = pd.DataFrame(records["ln"]["comparisons"])
results.save_table(out, "ln_fusion_speedup", comparisons)
fig = figures.plot_ln_bars(records)
plots.save_figure(fig, out, "ln_fusion")
comparisons[["dropout_p", "candidate", "ratio", "ratio_lo", "ratio_hi", "verdict", "predicted"]]

# %%
display(Markdown(analysis.ln_regime(records)))

# %% [markdown]
# How close each kernel comes to the DRAM bandwidth is the last column of the table above.
# With dropout on, the mask's random-number generator dominates on this 2-core CPU and
# neither kernel gets near the bandwidth; without dropout the compiled kernel is not faster
# here. The kernel count (fewer passes over memory: see the counts above) is the part of the
# story that transfers unchanged to a GPU, where launch overhead and HBM round trips make the
# bytes model the whole story.
#
# ## 3 · Attention vs sequence length (A8, B3)
#
# Naive attention materialises the s×s scores and probabilities; SDPA dispatches to a fused
# kernel that keeps only a per-row log-sum-exp. Bytes kept for backward are counted exactly
# (the same saved-tensor hooks as study 04, inputs excluded). Naive attention is skipped with
# the reason where its s×s tensors would exceed `p.naive_memory_limit_mib`.

# %%
attn = analysis.attention_table(records)
results.save_table(out, "attention", attn)
assert attn.agrees_with_sdpa.all(), "attention variants disagree"
display(Markdown(f"SDPA dispatched to **`{records['attention']['backend']}`**."))
display(
    Markdown(
        f"Naive attention stops fitting in {p.naive_memory_limit_mib} MiB beyond about "
        f"**{records['attention']['naive_max_seq_len']:,} tokens** (4·e·b·a·s² bytes of scores, "
        "probabilities and their gradients); SDPA's memory grows linearly."
    )
)
for s in records["attention"]["skipped"]:
    print(f"skipped {s['impl']} at {s['seq_len']}: {s['why']}")
attn[
    [
        "seq_len",
        "impl",
        "median_s",
        "q1_s",
        "q3_s",
        "saved_bytes",
        "peak_added_bytes",
        "peak_method",
        "kernels",
    ]
]

# %%
fig = figures.plot_attention(records)
plots.save_figure(fig, out, "attention")
pd.Series(analysis.attention_slopes(records), name="log-log slope").to_frame()

# %% [markdown]
# ## 4 · A8 at the article's scale
#
# The article: 7B, sequence 4096, batch 16 — "activation memory −40%, step time −18%".
# Korthikanti's Table 2 with and without the a·s² terms (scores, softmax, dropout) gives the
# activation memory per layer with and without a flash kernel:

# %%
a8 = analysis.a8_article_scale()
pd.Series(a8).to_frame("value")

# %% [markdown]
# ## 5 · `torch.compile` at model level (B5) and matmul dtypes (B4)
#
# The reference model's training step (forward + backward), eager vs compiled; the first
# call includes compilation (cached under `scratch/inductor-cache`, so a second run is much
# faster). Graph breaks are counted with `torch._dynamo.explain`; a variant with a forced
# break in every block shows what breaks cost.

# %%
ct = analysis.compile_table(records)
results.save_table(out, "model_compile", ct)
ct[
    [
        "variant",
        "first_call_s",
        "graph_breaks",
        "median_s",
        "speedup_vs_eager",
        "speedup_lo",
        "speedup_hi",
        "verdict",
    ]
]

# %%
dt = analysis.dtype_table(records)
results.save_table(out, "matmul_dtypes", dt)
dt

# %% [markdown]
# TF32 is an NVIDIA tensor-core format (fp32 range, 10-bit mantissa); a CPU has no TF32 path,
# so B4 can only be checked on a GPU. The datasheet ratio is shown for reference.
#
# ## Claims
#
# Verdicts are computed: A7 and B5 from the bootstrap interval of the speed-up against the
# claimed size (≥ 1.3× and ≥ 1.08×; *inconclusive on this machine* when the interval straddles
# the claim and no effect); A8 from the log-log slopes of exact saved bytes (> 1.7 and < 1.3);
# B3 from the kernel SDPA dispatched to; B4 from the measured tf32/fp32 ratio where TF32 exists.

# %%
claim_list, headline = analysis.outcome(records, p)
claims_df = results.publish_claims(out, claim_list, headline)
with pd.option_context("display.max_colwidth", None):
    display(claims_df)

display(Markdown(stability_note(out)))
# %% [markdown]
# ## What this study showed

# %%
slopes = analysis.attention_slopes(records)
lines = [
    f"* LN + residual + dropout: {len(records['ln']['rows'])} measurements; "
    + "; ".join(
        f"{c['candidate']} vs eager {c['ratio']:.2f}× [{c['ratio_lo']:.2f}, {c['ratio_hi']:.2f}] "
        f"(predicted {c['predicted']:.2f}× if memory-bound)"
        for c in records["ln"]["comparisons"]
    )
    + "."
]
if slopes:
    lines.append(
        f"* Saved attention memory grows with slope {slopes.get('naive_saved_bytes_slope', float('nan')):.2f} "
        f"(naive) vs {slopes.get('sdpa_saved_bytes_slope', float('nan')):.2f} (SDPA, `{records['attention']['backend']}`)."
    )
lines.append(summary_line(claim_list))
display(Markdown("\n".join(lines)))
