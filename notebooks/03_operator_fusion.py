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
# 2. predicts and measures the fusion of LayerNorm + residual add + dropout in DRAM, times
#    dropout's random numbers apart, and bounds what it does to a whole layer (claim **A7**);
# 3. measures attention variants vs sequence length — time and exact saved memory (**A8**) —
#    and which kernel SDPA picks, here and by PyTorch's rules on CUDA (**B3**);
# 4. scales A8 to the article's 7B setting with the memory model;
# 5. compiles the reference model's training step (**B5**) and compares matmul dtypes (**B4**).

# %% tags=["parameters"]
params = {}  # the profile's values (papermill injects them); empty: the defaults, the laptop profile
out_dir = ""  # set by the runner; empty: scratch/fusion
from_dir = ""  # analyse measurements from this folder instead of measuring

# %%
from IPython.display import Markdown, display

from mfulab.measure import calibration
from mfulab.studies.fusion import claims, figures, onepass, sdpa_rules, stated
from mfulab.studykit import plots, verdicts
from mfulab.studykit.notebook import setup, stability_note
from mfulab.studykit.step_error import step_model_error_line
from mfulab.studykit.verdicts import summary_line

out, p, records = setup("fusion", params, out_dir=out_dir, from_dir=from_dir)
o = claims.outcome(records, p)  # every table below, the claims and the headline metrics, computed once
o.save_tables(out)
print(
    f"device: {records['device_name']} ({records['device']}), {records['num_threads']} threads, "
    f"torch {records['torch']}"
)

# %% [markdown]
# ## 1 · Why small ops are memory-bound: the roofline
#
# A kernel's time is at least max(FLOPs / peak, bytes / bandwidth). The **ridge point**
# peak / bandwidth (FLOPs per byte) separates memory-bound kernels (left) from compute-bound
# ones (right). Both roofs are timed **in the same rounds as the kernels** they bound: a copy
# of a tensor several times the last-level cache (read + write counted, as the calibration
# counts it) and the layer's own MLP matmul. The machine's calibration, shared with study 01, is
# printed beside them: it was taken once, earlier, and a VM's speed moves between sessions (the
# same 2-core "AMD EPYC" name has covered hosts of two CPU generations, whose copies read 18 and
# 31 GB/s). A roof taken on a slower day than the kernels would be beaten by them; the ceiling
# drawn is the higher of the calibrated square matmul and the layer's GEMM.
#
# Each LayerNorm sub-block sits at its FLOPs divided by the bytes it **really** moves: the passes
# over memory counted in §2 (ATen's source for eager, inductor's generated source for compiled),
# × N·e bytes each. The hollow mark on the same line is the bytes model's minimum (§2: 5·N·e
# eager, 4·N·e fused at p = 0): where it sits right of the filled one, the kernel moves more than
# the minimum (inductor's compiled kernel on a CPU makes more passes than the fused 4: §2).
#
# **The DRAM roof is a band.** The copy bandwidth counts 2 passes per copied
# element (read src, write dst), but an ordinary cached store first reads its line from DRAM
# (write-allocate), so DRAM serves 3. A kernel that reads R and writes W tensors moves R + 2·W
# through DRAM while the figure counts R + W: its own roof is (R + W)/(R + 2·W) × 3/2 of the
# copy bandwidth, between 1× (a copy) and 1.5× (a kernel that only reads) — the grey band.
# Circles (tensors ≥ 4× the last-level cache, served by DRAM) can therefore sit a little above
# the black line, up to their own roof (§2's `dram_roof_vs_copy`); squares are at the layer's
# shape, whose tensors fit in the cache, so they can sit above the whole band.

# %%
display(Markdown(calibration.describe(records)))
display(o.tables["roofs"])
fig = figures.plot_roofline(records, o.tables["roofline_points"])
plots.save_figure(fig, out, "roofline")

# %% [markdown]
# ## 2 · LayerNorm + residual + dropout (A7)
#
# `h = x + dropout(a); y = layer_norm(h)`. The bytes model counts the minimum traffic: three
# unfused kernels move **7·N·e + N** bytes (e: element size; N: a 1-byte dropout mask), one
# fused pass reads `x` and `a` and writes `h`, `y` and the mask: **4·N·e + N**. Memory-bound,
# the predicted speed-up of the sub-block is the ratio of the two.
#
# The claim, though, is about **one layer's forward**: "about 30% less time" (大约, 耗时降低). The
# chapter reads every "about N%" one way: a figure rounded to tens of percent holds within 5
# points, so the layer's time × 0.75 at the least, a **1.33×** speed-up (1.43× at exactly 30%;
# A8's "about 40%" below is read the same way). So the study measures three things, all timed
# *interleaved* (every round runs every variant once, in a shuffled order):
#
# 1. `dram`: the sub-block at p = 0 in the memory-bound regime — x, a, h and y together
#    several times the last-level cache, sized from this machine's calibration — eager vs
#    `torch.compile` (inductor), and the fused kernel the article describes, written by hand:
#    on a CPU a one-pass C kernel (`fusion/onepass.py`: per row it reads x and a, draws the
#    dropout mask in registers, builds h and y in the core's cache and streams both out with
#    non-temporal stores, which do not read a line before writing it: 2 reads and 2 writes over
#    DRAM, where each of eager's writes also reads its line), on CUDA a Triton kernel. On a CPU
#    its **controls** run in the same rounds: the same C code as one pass with ordinary stores,
#    and as eager's two passes (the add, then LayerNorm) with either store, so that fusion's own
#    effect (one pass against two, same stores) is timed apart from the streaming stores'; and,
#    at the study's p, the one pass with ordinary stores against the article's **three kernels**
#    (dropout, residual add, LayerNorm: three C passes, d and h crossing memory), both drawing
#    the mask from the same hash so that only the passes differ. The
#    rounds cycle through copies of x and a: where a run's one copy sat in memory moved its
#    ratios by up to ±8% (one pass over two with ordinary stores read 1.09–1.27× over 12 fresh
#    runs with one copy, 1.11–1.19× over 8 cycling four);
# 2. `layer`: the sub-block at the shape of one layer's activations, at p = 0 and at p:
#    the difference is dropout's random numbers, which cost the same per element at any
#    size on a CPU (they are compute, not bytes), so they are not re-timed on the large
#    tensors;
# 3. one GPT layer's forward (`gpt.Block`, same hidden size) in the same rounds: the
#    sub-block's share of the layer, and Amdahl's bound on what fusing it can do.
#
# Correctness gates: outputs equal to eager at p = 0, the dropped fraction at p > 0.

# %%
display(Markdown(o.values["ln_regime"]))
ln = o.tables["ln_fusion"]
assert ln.correct.all(), "an implementation disagrees with eager"
if records["ln"]["triton_skipped"]:
    print("Triton kernel skipped:", records["ln"]["triton_skipped"])
if records["ln"].get("onepass_skipped"):
    print("one-pass C kernel skipped:", records["ln"]["onepass_skipped"])
print(o.values["compile_sentence"])
ln[["shape", "tokens", "impl", "dropout_p", "median_s", "q1_s", "q3_s", "n", "ns_per_element"]]

# %% [markdown]
# Fused vs eager, the ratio of medians with its interval (rounds resampled, widened by the
# assumed run-to-run drift), next to the bytes model's prediction and, on CPU, the
# prediction from the passes over memory each implementation really makes, counted as passes
# and as DRAM traffic with write-allocate (each write twice, §1):

# %%
comparisons = o.tables["ln_fusion_speedup"]
comparisons[
    [
        "shape",
        "dropout_p",
        "candidate",
        "ratio",
        "ratio_lo",
        "ratio_hi",
        "predicted",
        "predicted_by_passes",
        "predicted_by_traffic",
    ]
]

# %% [markdown]
# **Fusion apart from the stores (A7's mechanism).** The one-pass kernel against ATen's eager
# mixes three things: one pass instead of two, streaming stores instead of ordinary ones, and our
# code instead of ATen's. The controls take them apart, each pair timed in the same rounds and
# next to the ratio its DRAM traffic predicts (reads + writes, an ordinary write counted twice).
# The mechanism row reads the article's case: dropout, add and LayerNorm in one pass against
# three, at p, ordinary stores on both sides (predicted 10/6 = 1.67×); the add + LN pairs at
# p = 0 are its other readings. An interval is widened by these ratios' spread between fresh
# runs of this box (`ln_control_ratio_drift`, params.py):

# %%
print(onepass.kernel_source())  # the fused kernel: per row, one read of x and a, h and y stored once

# %%
controls = o.tables["ln_controls"]
controls if len(controls) else print("no controls ran here (they are CPU fp32 C kernels)")

# %% [markdown]
# **Dropout's random numbers**, apart: the sub-block at p minus the same at p = 0, per round,
# next to what the whole p = 0 sub-block costs per element in DRAM.

# %%
rng = o.tables["ln_dropout_rng"]
rng

# %% [markdown]
# **Kernels and passes.** Kernels are counted by the profiler (innermost aten ops over the
# tensor plus inductor's generated kernels); passes over memory (tensor-sized reads and
# writes) are read from inductor's generated source for the compiled kernel (its loop nests
# and the tensor-sized loads and stores in each) and from ATen's source for eager on a CPU
# (the notebook's text below), as reads + writes. The achieved bandwidth, as a fraction of the
# copy bandwidth, is shown three ways: with the bytes model's minimum bytes
# (`fraction_of_measured_bandwidth`); with the passes really made, × N·e, counted as the copy
# counts its bytes (`fraction_of_bandwidth_by_passes`: a DRAM-bound kernel that mostly reads
# exceeds 1.0, up to its `dram_roof_vs_copy`, because the copy's write-allocate reads are not
# counted, §1); and against that roof (`fraction_of_dram_roof`: **1.0 means "as fast as DRAM
# allows"** for the DRAM rows; the layer's rows fit in the cache and can exceed it):

# %%
display(Markdown(o.values["kernel_sentence"]))
ln[
    [
        "shape",
        "impl",
        "dropout_p",
        "kernels",
        "passes_over_memory",
        "reads_writes",
        "fraction_of_measured_bandwidth",
        "fraction_of_bandwidth_by_passes",
        "dram_roof_vs_copy",
        "fraction_of_dram_roof",
    ]
]

# %% [markdown]
# **Why compiled can be slower than eager at p = 0 (on the 2-core CPU reference box it is).**
# A fused kernel wins only if it makes fewer passes over memory; the counts above say whether
# inductor's did on the device that ran:

# %%
display(Markdown(o.values["compiled_vs_eager_p0"] or "*(CPU only: the generated C++ source.)*"))

# %% [markdown]
# **The layer.** The GPT layer already runs its residual adds and LayerNorms (the sub-block
# at p = 0, twice); without them it is the *rest* of the layer. Per round: the rest plus two
# unfused sub-blocks at p, plus two compiled ones, plus two *free* ones (Amdahl's ceiling
# 1 / (1 − share)). The second row takes the sub-block's p = 0 part per element from the DRAM
# run instead, a second reading of its cost at the layer's size (which of the two gives the
# larger share, the one that favours the claim, is printed under the table from this run):

# %%
layer = o.tables["ln_layer_share"]
fig = figures.plot_ln_bars(records, o.tables)
plots.save_figure(fig, out, "ln_fusion")
display(layer)
if len(layer) == 2:
    at_layer, per_dram = layer.sub_block_share.iloc[0], layer.sub_block_share.iloc[1]
    display(
        Markdown(
            f"Per element as in DRAM the sub-block's share is {per_dram:.2%}, against {at_layer:.2%} timed at "
            f"the layer's shape: the {'DRAM' if per_dram > at_layer else 'layer-shape'} reading is the larger "
            "share, the one that favours the claim; neither reaches the share the claim needs "
            f"({layer.share_needed_for_claim.iloc[0]:.0%})"
            if max(per_dram, at_layer) < layer.share_needed_for_claim.iloc[0]
            else f"Per element as in DRAM the sub-block's share is {per_dram:.2%}, against {at_layer:.2%} "
            "timed at the layer's shape."
        )
    )

# %% [markdown]
# **The model that prices the article's layer, checked on this one.** Before it is used at the
# article's scale, the same model (matmul FLOPs 24·h²·(1 + s/6h) per token at a ceiling, the
# sub-block's minimum bytes at a bandwidth, 3 kernels per call at a cost per launch;
# `layer_share`) is applied to the layer timed above, with the layer's GEMM rate and the copy
# bandwidth timed in the same rounds (§1) and eager dispatch per op as its inputs. What it can
# test here is the matmul term, against a tolerance of ±15% declared before the check first ran
# on in-round rates. It cannot test the sub-block's terms: at the layer's shape the tensors sit
# in cache while the model prices DRAM bytes, and it has no term for dropout's random numbers,
# which on this CPU are most of the eager sub-block's time (the table above). The matmul term's
# rate is the layer's own MLP GEMM timed in the same rounds, so a pass checks the layer's FLOP
# count at one shape, little more (the attention matmuls ride at the MLP's rate, the softmax and
# GELU are left out: errors can cancel); nothing on the sub-block's side, which rests on the
# bytes model and the datasheet bandwidth:

# %%
o.tables["a7_model_check"]

# %% [markdown]
# **The article's 13B layer**, analytically: one layer's forward matmuls, 24·h²·(1 + s/6h)
# FLOPs per token, at the datasheet peak of the article's cards × an assumed matmul
# efficiency, against the sub-block's bytes (twice per layer) at the datasheet bandwidth × an
# assumed bandwidth efficiency, per card in the article's own layout: its launch command
# trains this model at tensor parallelism 8 without sequence parallelism, so each card runs
# 1/8 of the matmuls but LayerNorm, dropout and the residual add on the whole sequence (the
# article's own §4.2 point). The same layout puts two TP all-reduces of the sequence's
# activations in every layer's forward, on its critical path (the next GEMM waits for them):
# they are in the layer's time, priced as the step model prices them (the card's HCCS link;
# the `tp_comm_share` column), and the bound without them is a row reported below the table.
# Everything else in the layer is left out, so the share is too
# large and the speed-up an upper bound on bytes and launches. One cost works the other way and is
# left out too: eager's dropout random numbers (its mask's bytes are counted, the drawing is not),
# which a fused kernel may draw more cheaply; on this CPU they are most of the eager sub-block (the
# check above), on an accelerator they are cheap next to the bytes, but where they are not, the
# fused layer could gain more than this bound. The article's second mechanism, **kernel launches**
# ("three launches become one"), is a term of its own: each call of the sub-block (one 4096-token
# sequence here) launches 3 kernels unfused and 1 fused, each at an assumed 5 µs of exposed time
# (a GPU's launch path; Ascend publishes none; exposed only when the device waits for the host,
# so an upper bound). The table varies each assumption, the layout among them (one card; TP 8
# with sequence parallelism, which splits the sub-block too) and the launch cost (none, 20 µs,
# and this machine's own eager dispatch, timed below), and gives two break-evens: the bandwidth
# efficiency below which even a free sub-block would reach 1.33×, and the eager kernels' speed
# over the fused kernel's below which the fused kernel the claim describes reaches it:

# %%
launch = records.get("launch")
if launch:
    display(
        Markdown(
            f"One eager op dispatch on this machine: **{launch['per_op_s'] * 1e6:.2f} µs** "
            f"[{launch['per_op_q1_s'] * 1e6:.2f}, {launch['per_op_q3_s'] * 1e6:.2f}] (quartiles; "
            f"{launch['ops_per_call']} one-element adds back to back; the result checked: {launch['correct']})."
        )
    )
sensitivity = o.tables["a7_article_sensitivity"]
display(sensitivity)
central = sensitivity.iloc[0]
display(
    Markdown(
        f"At the article's layout (TP {central.tp}, sequence parallelism {'on' if central.sequence_parallel else 'off'}) "
        f"and the central assumptions the sub-block is **{central.sub_block_share:.1%}** of the layer (the share "
        f"column). Even a free sub-block (the fused kernel taking no time) reaches {stated.A7_LAYER_SPEEDUP:.2f}× "
        "only with the eager "
        f"kernels at **≤ {central.break_even_bandwidth_efficiency:.1%}** of the datasheet bandwidth "
        "(`break_even_bandwidth_efficiency`); the fused kernel the claim describes needs the eager kernels at "
        f"**≤ {central.break_even_eager_ratio:.0%}** of its own bandwidth (`break_even_eager_ratio`); its launches are "
        f"**{central.launch_share:.1%}** of the layer at {central.launch_s * 1e6:g} µs each."
    )
)

# %% [markdown]
# On a CPU dropout's random numbers, not memory traffic, dominate the sub-block with
# dropout on (the RNG table shows whether they did on the device that ran), so the bytes
# model does not describe that case there; at p = 0
# the tensors are in DRAM and the passes decide. On an accelerator (a prediction, not measured
# here: no GPU ran this chapter) the RNG is cheap and the bytes model is the sub-block's story;
# whether the layer gains 30% then turns on the layout and on how close the eager kernels come to
# the datasheet bandwidth (the line above). A
# 4096-token call amortises the launches, so at this size fusion pays through bytes, not
# launches (the launch rows say how far 20 µs moves it).
#
# ## 3 · Attention vs sequence length (A8, B3)
#
# Naive attention materialises the s×s scores and probabilities; SDPA dispatches to a fused
# kernel that keeps only a per-row log-sum-exp. Bytes kept for backward are counted exactly
# (the same saved-tensor hooks as study 04, inputs excluded). Naive attention is skipped with
# the reason where its s×s tensors would exceed `p.naive_memory_limit_mib`.
#
# The times (forward + backward, `median_s`) compare more than memory traffic: naive attention
# computes all s×s scores and then masks the upper triangle, while a causal flash kernel skips
# the key blocks above the diagonal, about half the QKᵀ and PV matmul FLOPs at long sequences. Part
# of SDPA's lead at 2048 tokens is therefore work it does not do, not bytes it does not move; the
# course's step model prices both kernels' attention matmuls alike, which understates the fused
# step's gain (the A8 step row below).

# %%
attn = o.tables["attention"]
assert attn.agrees_with_sdpa.all(), "attention variants disagree"
display(Markdown(f"SDPA dispatched to **`{records['attention']['backend']}`** on this {records['device']}."))
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

# %% [markdown]
# The slopes of log(time) and log(saved bytes) against log(length): 2 is O(n²), 1 is O(n). The
# flash kernel still does O(n²) work (every query meets every earlier key), so its *time* is
# O(n²) too; its fitted slope below 2 at these lengths is not a faster algorithm. Two things pull
# a short-length slope below 2, and both fade toward 2 as n grows: costs that grow slower than n²
# (set-up, per-row work), and a causal kernel's skipped key blocks above the diagonal (with nb
# blocks per row it does (nb + 1)/(2·nb) of the full s² work: the diagonal blocks, computed whole,
# are a larger share of few blocks). Which of the two dominates here is not measured (timing SDPA
# with `is_causal` off beside on would separate them). Only its *memory* is O(n), by construction.

# %%
fig = figures.plot_attention(attn, o.values["attention_slopes"])
plots.save_figure(fig, out, "attention")
o.tables["attention_slopes"]

# %% [markdown]
# **Which kernel SDPA picks (B3)** depends on the inputs and the device. On this device, for
# the study's inputs and for inputs that change the choice:

# %%
cases = o.tables["sdpa_dispatch"]
cases

# %% [markdown]
# That is a fact of this device. On CUDA, PyTorch's own filters (`sdp_utils.cpp`,
# `can_use_flash_attention`) decide, and a rejected flash kernel falls back silently to the
# memory-efficient kernel or to math. Flash is **not** eligible when:

# %%
rules = o.tables["sdpa_flash_rules"]
display(Markdown(f"Source: {sdpa_rules.SOURCE}."))
reasons = o.values["cuda_flash_reasons"]
cap = records["attention"].get("cuda_capability")
gpu = f"this GPU (sm{cap[0]}{cap[1]})" if cap else "an A100 (sm80)"
display(
    Markdown(f"This run's attention inputs on {gpu}: " + ("; ".join(reasons) or "eligible for flash") + ".")
)
rules

# %% [markdown]
# ## 4 · A8 at the article's scale
#
# The article: 7B, sequence 4096, batch 16 — "activation memory −40%, step time −18%".
# Korthikanti's Table 2 with and without the a·s² terms (scores, softmax, dropout) gives the
# activation memory per layer with and without a flash kernel:

# %%
o.tables["a8_article_scale"]

# %% [markdown]
# That −82% rests on a reading the article does not state: Table 2 as printed (attention
# dropout on, no tensor parallelism), activations only, "batch 16" as one device's micro-batch.
# That reading cannot be the article's setup: 32 layers would keep about 1.7 TB on one device
# without flash (the `naive_GB_per_device` column). The article's only words on dropout are
# that MindSpeed's fused operator "also fuses dropout, mask and the like" (还把 Dropout、Mask
# 之类的操作一并融进去了): an operator that can fuse attention dropout, not a statement that its
# 7B trained with it. The table varies each assumption (and the combination with the smallest
# cut); `vs_stated` is the cut minus the stated 40%:

# %%
a8_sens = o.tables["a8_article_sensitivity"]
display(Markdown(o.values["a8_sensitivity_sentence"] + "."))
a8_sens

# %% [markdown]
# The sentence above the table gives the range of the cut and the readings nearest the
# article's −40%: it sits at the low end of the range, where the smaller cuts come from
# tensor parallelism without sequence parallelism (the LayerNorm and dropout activations stay
# whole on every device while the a·s² terms are split) with attention dropout off, or from
# model states counted at a small micro-batch. "Attention dropout off" keeps the hidden
# dropouts' masks; "all dropout off" (as Llama 2 trains, read on Table 2's GPT layer) drops them too, which shrinks the naive
# side without touching the a·s² terms, so its cut is a little larger. A baseline that already
# recomputes the attention core (Megatron's selective recompute, Korthikanti §4.2) keeps no a·s²
# terms, so the fused kernel cuts nothing there: the two "selective recompute" rows. Memory that
# both sides keep and the table leaves out (the logits, allocator fragmentation) would shrink
# every cut further. Only layouts that can hold one sequence on the card vote (the `one_sequence_fits_card`
# column: one sequence's naive activations plus the model states at that TP, the optimizer's
# sharded over the data-parallel ranks, within the 910B's 64 GiB): TP 1 and TP 2 cannot, so their
# cuts (−65% to −82%) are context. "About 40%" is a figure rounded to tens of percent, so a reading
# reproduces it within 5 points (35–45%); each fitting reading answers yes or no, and the row
# follows the course's rule over scenarios (`attention_memory.memory_answers`,
# `verdicts.over_scenarios`): the −40% is what TP 8 without sequence parallelism gives with dropout
# off, and far from what it gives with dropout on or with sequence parallelism, so which setting
# the article's 7B trained with decides, and the article does not say.

# %% [markdown]
# **The −18% step time** needs a model of time, not of memory: the course's step model
# (`step.step_time`, chapter 09) prices the 7B step on 8 of article A's 910B cards with naive
# and with fused attention — the same GEMMs, plus naive attention's memory-bound softmax,
# masking and dropout over a·s² elements and its larger backward — over the same readings
# (TP 1, 2, 8; micro-batch 16, 2, 1) and the step model's own assumptions (the HBM efficiency
# of memory-bound kernels, the backward's traffic, the GEMMs' share of MAMF) at the central
# reading that fits. The article names no layout, so the readings that fit the card are its
# stated case, and each must reproduce the cut as a naive/fused step ratio (1.22× for 18%): within
# the course's decisive margin for a switch (the line below: the attention kernel is a switch) of
# that ratio and beyond it from 1 (`step_error.reproduces_ratio`, the rule chapter 02's A4 uses);
# beyond the margin of 1.22× it misses. The assumed inputs vary that answer by the
# course's rule for unstated inputs: only one that gives the opposite answer reverses it. The
# margin is the model's error on the ratio of two modelled steps, so the row decides only when
# the stated cut, as a naive/fused ratio (1.22× for 18%), lies beyond it; inside it the rows
# inform and the verdict is analytic only (`attention_memory.a8_step_claim`; `stated.A8_STEP_MARGIN`).
# **Plainly: this model cannot decide a switch claim smaller than its margin.** A cut of 18% is a
# 1.22× ratio, inside the switch margin (about ±52%, taken where no one source places it: chapter 09;
# its pool of published switch pairs holds no attention-kernel pair, so here it is borrowed
# unvalidated), so
# whatever the readings give, the row can say only whether the model's answer is consistent with
# the article's, not decide it; the readings' modelled cuts are printed as that answer.

# %%
display(Markdown(step_model_error_line()))
o.tables["a8_step"]

# %% [markdown]
# ## 5 · `torch.compile` at model level (B5) and matmul dtypes (B4)
#
# The reference model's training step (forward + backward), eager vs compiled, timed
# interleaved after each variant's first call. The claim is about an 8B model's step on GPUs:
# on a CPU the numbers are shown and the verdict stays *inconclusive on this machine*.
#
# **What `first_call_s` is.** The first call compiles: dynamo captures the graph, AOTAutograd
# derives the backward, inductor generates kernels and a C++ (CPU) or Triton (GPU) compiler
# builds them. Inductor keeps the built kernels in an on-disk cache that outlives the process;
# `cache` says whether this run found them there (**warm**: every graph from the cache, so only
# capture and loading were timed). A warm first call is *not* what a user pays the first time:
# a cold compile adds code generation and compiling every kernel. `cold_first_call_s` measures
# it in a fresh process with an empty temporary cache when the profile sets
# `compile_cold_process: true` (otherwise the column is empty: not measured in this run).
#
# **The graph-break variant** calls `torch._dynamo.graph_break()` from a hook before every
# block's MLP, so dynamo compiles the model in pieces and runs the Python in between eagerly.
# Dynamo does not guard on module hooks by default, so a second model of the same code would
# silently reuse the first one's graph and never break; the measurement turns the hook guards on and reports the breaks *taken* per step
# (the hook's calls) and the graphs compiled (at least breaks + 1: each break splits a graph in
# two, and a break inside a nested call can also split the calling frames around it). It is compiled, in pieces, not eager.

# %%
ct = o.tables["model_compile"]
cols = ["variant", "first_call_s", "cache", "cache_hits", "cache_misses", "cold_first_call_s"]
cols += ["graphs_compiled", "breaks_taken_per_step", "median_s", "speedup_vs_eager", "speedup_lo"]
cols += ["speedup_hi", "verdict"]
print(f"graphs recompiled during the timed rounds: {records['compile']['recompiled_during_timing']}")
for variant, why in records["compile"].get("skipped", {}).items():
    print(f"{variant} skipped: {why}")
ct[[c for c in cols if c in ct]]

# %% [markdown]
# **Where inductor's fuser wins on a CPU, and what graph breaks cost (B5's mechanism).** The model
# step above gains little or nothing from compiling here (its interval in the table, which varies
# between runs around 1×), and the LayerNorm sub-block (§2) loses, because
# inductor's CPU kernel for a reduction makes more passes than ATen's. A chain of pointwise ops
# with no reduction, y = gelu(a + b)·c + a (`fusion/pointwise_chain.py`), is where the fuser can
# show its gain: eager runs 4 kernels, 7 tensor reads and 4 writes; inductor one loop, 3 reads and
# 1 write, so DRAM traffic (an ordinary write counted twice) predicts 15/5 = 3×. The same chain is
# also compiled with a `graph_break()` after every op, four graphs each holding one op again:
# in DRAM it should fall back to eager's passes (the fusion lost), and on a small tensor in cache,
# where a compiled graph's fixed cost per call (guards, the compiled function's entry) is of the
# order of its work, each extra graph should make it slower than eager, which is what the
# article's "性能反而下降" says. The article names a second source of compile's gain beside the
# fuser, shape specialisation; the chain tests the fuser's mechanism, not its share of a model's
# gain (this model shows little gain to share out). `fraction_of_dram_roof` is counted as for the
# LayerNorm rows (1.0: as fast as DRAM allows; the 64-row tensors sit in cache and are not
# bounded by it): a loop far below its roof is limited by something other than its bytes. All three at both
# sizes in the same interleaved rounds, each gated against eager's output:

# %%
chain = o.tables["pointwise_chain"]
chain if len(chain) else print("no pointwise chain in these records")

# %%
display(Markdown(o.values["dtype_note"]))
o.tables["matmul_dtypes"]

# %% [markdown]
# TF32 is an NVIDIA tensor-core format (fp32 range, 10-bit mantissa); a CPU has no TF32 path,
# so B4 can only be measured on a GPU; here it is decided on the datasheet ratio.
#
# ## Claims
#
# Verdict words (the rule is `docs/claims.md`): *confirmed* / *refuted* when a measurement in the
# claim's regime, a cited figure, a specification, an exact count or the article's own arithmetic
# decides; *(analysis)* when an analysis at the article's configuration decides, and *analytic
# only* when the analysis cannot decide (a sensitivity row reverses it, the reading does, or the
# model's margin is wider than the effect, as for A8's step); *shown* / *not shown* for a
# mechanism in a toy regime; *inconclusive on this machine* where this machine cannot reach the
# regime and no analysis is made; *not checkable* when nothing can be tested or two readings of
# the sentence disagree. Each row names its basis.
#
# Verdicts are computed, and each names its basis (`docs/claims.md`: a toy regime can only
# show or not show a mechanism). A7 is about the layer, threshold 1.33× (about −30% time, −25% at
# the least): measured
# on this CPU (a toy regime), *inconclusive on this machine* when even a free sub-block cannot
# make the layer that fast (the upper end of Amdahl's ceiling is below 1.33×: this machine's
# layer cannot reach the claim's regime, and a toy regime cannot refute), *shown* when the layer
# with the fused sub-block (the kernel the mechanism row reads, `layer_measured.layer_fused_impl`:
# the one-pass C kernel on a CPU) is at least 1.33× faster; at the article's 13B layer in its own layout,
# judged on the fused sub-block the claim describes: *refuted (analysis)* when the layer with it
# stays below 1.33× in every row of the sensitivity table *and* a published eager/fused
# bandwidth ratio for the article's card rules out the break-even (the assumed eager kernels'
# efficiency decides: the table's rows cover only the ratios published for other cards),
# *analytic only* otherwise (a free sub-block is the ceiling beside it, with the rows where it
# would pass). A7's mechanism, fewer passes over DRAM in less time, is its own row. On a CPU
# it reads the controls (above), decided on the article's case: one C pass of dropout, add and
# LayerNorm against the same code's three passes, at p, with eager's ordinary stores and the
# same random numbers: *shown* when that interval lies above 1× and no fusion pair's lies below
# it, *not shown* when any lies below 1×, *inconclusive on this machine* otherwise; the one-pass
# kernel against ATen's eager
# is its context (fusion and stores together). Without the controls (a GPU's Triton kernel), it
# reads the fused kernel with the fewest passes against eager: *shown* above what streaming stores
# alone would give (1× for a kernel without them), *not shown* below 1×, *inconclusive on this
# machine* when no fused kernel here makes fewer passes (inductor's CPU kernel makes more).
# The article's "LayerNorm alone moves the data twice" is checked against the kernels: whether
# the second traversal of a row is a second trip to DRAM depends on the kernel, and the article
# names none, so it is not checkable. "Three memory accesses become one" counts round trips and
# launches (the fused kernel "reads once … writes back once"): three kernels that each read and
# write once become one, true by construction, so *shown*; the bytes that move fall less than 3×
# (15 → 9 per element with dropout, bf16), a note beside it.
# B5's mechanism on the pointwise chain (toy regime): the
# fuser's gain *shown* when the compiled loop makes fewer passes than eager and runs faster beyond
# its interval, *not shown* when slower; "many graph breaks make performance fall" *shown* when
# the chain broken after every op is slower than eager at the small size and slower than
# the whole compiled chain in DRAM (the fusion lost), *not shown* when it is faster than eager
# there or as fast as the whole chain in DRAM. B5 from the
# interval of the step speed-up against 1.087× (an 8% shorter step; on a GPU only: a CPU is not
# its regime); in the same row, as context, the published measurement at the claim's model
# size, torchtitan's Llama 3 8B on H100s eager against compiled (`published.b5_published_context`):
# not a second verdict on the sentence, since the article's 8–12% is its own run on a setup it
# does not state. A8 from the log-log slopes of exact saved bytes (> 1.7 and < 1.3, by
# construction); its article-scale
# memory row over the readings that hold one sequence on the card, each within 5 points of −40% or
# not (`verdicts.over_scenarios`); its step time from the step model
# over the readings that fit and its assumptions. B3 from the kernel SDPA picked on this
# device; for CUDA, PyTorch's flash-eligibility rules at the article's inputs (bf16, head dim
# 128, causal, on an A100): *confirmed (documented specification)* when eligible; `enable_flash_sdp` from
# PyTorch's documentation and the switches recorded here: the switch only enables a backend that is
# on by default, so it forces nothing and at the defaults changes nothing (forcing is `sdpa_kernel`,
# which raises rather than falls back), so its effect as the sentence implies it (SDPA uses flash
# where it otherwise would not) does not happen: *refuted (documented specification)*. The article's
# FlashAttention sentence ("HBM reads and writes cut several-fold") from the published
# measurement in the FlashAttention paper (Figure 2: 40.3 → 4.4 GB): *confirmed* at 3× or more.
# B4's "吞吐可以翻倍" says throughput *can* double: confirmed where the measured tf32/fp32 ratio
# (where TF32 exists; on a CPU the A100 datasheet's) reaches the low end of 1.6–2.5×, refuted
# below it; a ratio past 2.5× does not make "can double" false, and the evidence notes that the
# sentence then understates the datasheet (`b4_rows.b4_claims`). A note on
# that row, from the article's own arithmetic, takes TF32 in B15's first step (the article turns
# it on beside SDPA and credits the gain to attention, so there is no claim of its own to judge):
# TF32 acts only on fp32 matmuls, and the baseline's stated FLOPs over 64 A100s in 10.2 s are
# several times the fp32 peak per GPU and most of the dense TF32 peak, so the matmuls were already bf16.

# %%
claim_list = o.claims
verdicts.publish_claims(out, o.claims, o.metrics)  # tables/claims.csv: the full table
display(Markdown(verdicts.claims_markdown(o.claims)))

display(Markdown(stability_note(out)))
# %% [markdown]
# ## What this study showed

# %%
slopes = o.metrics["attention_slopes"]
lines = ["* " + o.values["ln_summary"], "* " + o.values["kernel_sentence"]]
if slopes:
    lines.append(
        f"* Saved attention memory grows with slope {slopes.get('naive_saved_bytes_slope', float('nan')):.2f} "
        f"(naive) vs {slopes.get('sdpa_saved_bytes_slope', float('nan')):.2f} (SDPA, `{records['attention']['backend']}`)."
    )
lines.append(summary_line(claim_list))
display(Markdown("\n".join(lines)))
