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
# # 07 · Step anatomy: one real job, its step split four ways
#
# Each earlier study isolates one loss: study 01 a single process (no communication), 02 and
# 05 collectives without a data pipeline, 06 a data pipeline without collectives. Here one job
# has them all: the reference GPT under **DistributedDataParallel** on several ranks (gloo on a
# CPU, NCCL on GPUs, through the project's torchrun launcher), fed by a **DataLoader** over a
# corpus on disk, with a **checkpoint** every k steps. This notebook
#
# 1. splits each step, per rank, into useful compute and B2's four losses — slow operators,
#    communication wait, data wait and scheduling waste (the checkpoint write and the untimed
#    rest) — from explicit timestamps, with `torch.profiler`'s view beside it (**B2**);
# 2. rebuilds the article's optimisation ladder here, in its order: from its baseline as this
#    machine can run it, one knob at a time, each step's time, MFU and the loss it shrank (**B15**);
# 3. slows one rank down and shows that every rank's step follows the slowest (**B13**).

# %% tags=["parameters"]
params = {}  # the profile's values (papermill injects them); empty: the defaults, the laptop profile
out_dir = ""  # set by the runner; empty: scratch/anatomy
from_dir = ""  # analyse measurements from this folder instead of measuring

# %%
import pandas as pd
from IPython.display import Markdown, display

from mfulab import results
from mfulab.studies.anatomy import claims, figures
from mfulab.studykit import plots, verdicts
from mfulab.studykit.notebook import setup, stability_note
from mfulab.studykit.verdicts import summary_line

out, p, records = setup("anatomy", params, out_dir=out_dir, from_dir=from_dir)
o = claims.outcome(records, p)  # every table below, the claims and the headline metrics, computed once
o.save_tables(out)
rp, job = records["params"], records["job"]
print(
    f"{job['world_size']} ranks on {records['device_name']} ({records['device']}), model {rp['preset']} "
    f"({records['n_params'] / 1e6:.2f} M parameters), {rp['micro_batch']} × {rp['seq_len']} tokens per rank "
    f"per step, corpus of {records['corpus']['count']} documents"
)

# %% [markdown]
# ## 1 · The ladder's rungs
#
# Every rung is its own DDP model, optimizer and `DataLoader` (a `DistributedSampler` gives
# each rank its share), all built before the measurement, so that the rounds can interleave
# them: in each round every rung runs one block of steps, in an order drawn per round (the
# same on every rank). A block's time is the **slowest rank's**. The naive rung is article B
# §5.1's baseline as this machine can run it: DDP at its defaults (each bucket's all-reduce
# starts while backward goes on), at the article's bucket cap scaled to this model (below),
# attention as separate matmuls and softmax (the article's "standard implementation"), one JSON
# file per sample read in the training process (0 workers), and a synchronous checkpoint
# (`torch.save` + `fsync`).

# %%
o.tables["rungs"]

# %% [markdown]
# ## 2 · Where one step's time goes, per rank (B2)
#
# Article B §1.2 draws a step as a pie: useful Tensor-Core time and four losses, 算子效率低
# (slow operators), 通信等待 (communication wait), 数据等待 (data wait) and 调度浪费 (scheduling
# waste: synchronous checkpoints, throttled cards, poor CPU pinning). Per step and rank,
# timestamps around each phase give **data wait** (the batch from the loader, to the device),
# compute (forward, backward, optimizer), **communication wait** and **scheduling waste** (the
# checkpoint write and the untimed rest). Compute splits at the measured matmul ceiling
# (`verdicts.b2_compute_split`): **useful compute** is the rank's model FLOPs at its share of
# the ceiling (on a CPU the ranks share the cores the ceiling was measured on), the rest of
# its compute **slow operators**. The communication wait comes from the DDP comm hook: the
# time `backward()` still runs after the last hook returned (the all-reduces that backward
# did not hide). On a GPU these marks are CUDA events
# on the compute stream, read after the step's synchronise, since the host runs ahead of the
# device; here they are the host's clock. The naive rung's steps, every rank:

# %%
o.tables["b2_split"]

# %% [markdown]
# The same steps under `torch.profiler` (a few more steps of the naive rung after the rounds;
# `mfulab.measure.opprofile`, the operator categories of study 01 mapped onto compute and three
# losses: every computing op is compute (a profiler times kernels, not their distance from the
# ceiling, so it cannot split useful from slow), the gaps inside DDP's backward are
# communication, `data` is data, the checkpoint and the step's time outside every op are
# scheduling waste). Each rank's trace is in `traces/`: open it at
# [ui.perfetto.dev](https://ui.perfetto.dev) or `chrome://tracing`.

# %%
traces = [results.save_trace(out, r["profile"]["trace"], from_dir=from_dir) for r in job["ranks"]]
print("traces:", ", ".join(t or "(not in this render)" for t in traces))
agree = o.tables["profiler_vs_timestamps"]
agree.groupby(["rank", "category"])[["profiler_s", "timestamps_s", "share_difference"]].mean()

# %%
fig = figures.plot_rank_split(o.tables["profiler_vs_timestamps"])
plots.save_figure(fig, out, "rank_split")

# %% [markdown]
# The two views are not independent everywhere: data and checkpoint are the same annotated
# spans in both, and the profiler's communication reuses the hook's `mfulab.comm_wait` span.
# Only the compute ↔ communication boundary is drawn independently, and there they differ in
# one direction: the profiler books the autograd engine's own gaps inside backward and the
# hook's dispatch as communication, the timestamps book them as compute. The operator categories behind the profiler's compute, rank 0:

# %%
ops = o.tables["rank0_operator_categories"]
ops.groupby("category")[["seconds", "share_of_step"]].mean()

# %% [markdown]
# ## 3 · The B15 ladder, measured here
#
# Each rung turns on one knob over the one before, in article B §5.2's order: **fused
# attention** (its step 1: SDPA; TF32 has no CPU counterpart; the `node` profile's
# `compile: true` adds `torch.compile`, an extra knob the article's step 1 does not have), **buckets** (its step 2: the cap doubled, 25 → 50 MiB, with
# `gradient_as_bucket_view` and `static_graph`), **format + workers** (its step 4, webdataset
# tar with 12 workers, persistent workers and pinned memory; here packed uint16 tokens, chapter
# 06's fastest reader, read by one persistent worker per rank, as a 2-core box allows: two knobs
# at once as in the article's step), then
# §5.3's **background checkpoint** (the step copies the state to host memory, a thread writes
# it; the block's timer waits for the write, so nothing leaks into the next block). Its step 3
# (NCCL's GPUDirect RDMA and buffers) and step 5 (locked clocks) have no counterpart on gloo and
# a CPU. A DDP bucket never splits a tensor, so a cap means how many of the model's largest
# tensors, its MLP matrices, a bucket holds: the article's 7B at tensor parallelism 4 has
# 11008/4 × 4096 fp32 gradients per MLP matrix, 45.1 MB, so its step takes each bucket from one
# matrix (25 MiB) to about two (50 MiB). The caps here are the article's scaled by this model's MLP
# matrix over the article's (`ladder.article_bucket_caps_mib`, `records["bucket_caps_mib"]`), so
# the knob crosses the same boundary (`buckets_per_step` shows the count fall). On a CPU run (the reference results come from a 2-core box) a loader worker
# and gloo's reductions compete with the training threads for the same cores: a knob can cost
# there what it saves on a GPU node. Recompute would come last, where memory
# forces it; here it does not. The speed-up of each rung over the one before is a ratio of
# medians over the rounds, with its bootstrap interval (whole rounds resampled) widened by the
# run-to-run drift. `step_s` is the median over rounds of each block's seconds per step (the
# block's time on the slowest rank over its steps, its checkpoint inside); the categories (and the stacked
# bars below) are means over ranks and steps and sum to `mean_step_s`, which a checkpoint step
# or a slow round raises more than a median; `shrank_most` is named only where that interval
# excludes 1 and some loss shrank (where every loss grew, it says so), and `gain_s` is credited
# to the loss the knob targets (`targets`). The share the article speaks of, communication and
# data IO, is read over §5.2's three knobs: the background checkpoint (§5.3) came after its
# 10.2 → 8.5 s ladder and is credited on its own.

# %%
ladder = o.tables["b15_ladder"]
with pd.option_context("display.max_colwidth", 60):
    display(ladder)

# %% [markdown]
# **What the ladder can resolve here.** A knob can remove at most the loss it targets. In this
# naive step those losses are small: the attention kernels are about 1% of the step at this
# sequence length, the data wait a fraction of a percent, the communication wait a few percent,
# mostly one rank waiting for the other. Each is set beside its rung's interval half-width
# (`credit.knob_power`); where the whole target is smaller, the rung cannot show a change
# whatever the knob does, and its "no clear change" says nothing about the knob. The article's
# naive step had a 1.5 s data wait (~15% of its step) and a long all-reduce tail; this ladder
# rebuilds its knobs, not its losses, so B15 is judged at the case study's scale in chapter 09.

# %%
o.tables["b15_power"]

# %% [markdown]
# A knob's gain up the ladder depends on the knobs already on: a faster loader saves less once
# the step waits on something else, and the ladder's order decides which knob is "before". The
# attribution that does not depend on the order is leave-one-out: in the same interleaved rounds
# the last rung also runs without each knob in turn (`ladder.leave_one_out`), and a knob's gain
# is the last rung without it against the last rung (`loo_gain_s`, the ratio with its interval;
# `ladder_gain_s` is its gain up the ladder, beside it). The gains need not add up to the
# ladder's total: knobs interact. B15's verdict reads what the timestamps measured shrinking
# (§3 above); the leave-one-out and ladder-order credits are shown beside it.

# %%
o.tables["b15_leave_one_out"]

# %%
fig = figures.plot_ladder(
    o.tables["b15_ladder"], o.values["b15_total"], o.values["article_ladder"], o.values["checkpoint_knob"]
)
plots.save_figure(fig, out, "ladder")

# %%
fig = figures.plot_steps(records)
plots.save_figure(fig, out, "steps")

# %% [markdown]
# ## 4 · The slowest rank sets the step (B13)
#
# In its own blocks, the last rung runs once more with a **straggler**: on every second step
# the slowest rank (the most compute in its warm-up steps) spins on its core for a share of a step (`straggler_slowdown` of the last
# rung's step as timed in the warm-up block: the article's 8% in the full and gpu profiles,
# three times that in `cpu`, where an 8% delay's interval over 30 pairs spans the 50% line and
# the verdict flipped between fresh runs; as a share of the paired steps' median, which the row
# reports, the same delay reads differently wherever the warm-up step differs from the rounds'
# steps) before
# its forward, busy as a throttled card's slower kernels are (a sleep would free the core for the
# other rank); each such step is paired with the step before it (`analysis.b13_pairs`), and
# these blocks write no checkpoint. DDP is synchronous: the other ranks reach the step's
# all-reduces first and wait there. The question is the article's: how much of the delay
# reaches the job's step (`analysis.b13_effect`: the median of the pairs' differences, with its
# bootstrap interval), with what the other rank saw beside it: its communication wait with the
# straggler on and off, the delay arriving as waiting. On this box the two ranks' compute can
# differ (the per-rank table): a delay put on the faster rank is partly absorbed by its wait for
# the other, which is why the straggler is the rank with the most compute in the warm-up steps,
# as the article's card is slower than every other; where the ranks are near parity, which one
# that is changes from run to run.

# %%
o.tables["b13_per_rank"]

# %%
fig = figures.plot_straggler(records, o.tables["b13_per_rank"])
plots.save_figure(fig, out, "straggler")

# %% [markdown]
# ## Claims
#
# **B2** is a taxonomy: every lost second is booked to one of four kinds, the last (scheduling
# waste, "all scheduling and redundant operations") taking what the other three leave, so no split
# of a step can contradict it: true by construction, *shown (by construction)*; the article's own
# case study names a loss of each kind, and this run's split is descriptive (chapter 01 takes
# its "one or two main bottlenecks in most cases" as a row of its own). This run writes a synchronous checkpoint
# once per block of steps so that the write is timed; no real job writes that often, so the split
# and the ladder's checkpoint knob are also given at one write per 500 steps (Hugging Face
# Trainer's default `save_steps`). **B15** is the ladder: the gain of the article's §5.2 knobs
# split by what the timestamps measured shrinking, each knob's leave-one-out gain (capped at the
# loss it targets) and the ladder-order credit beside it; the article's regime (7B on 64 A100s) is
# out of reach of a CPU box, so its verdict is inconclusive here. On a CPU each rank owns one
# core, and its loader worker and the background writer run on it too: those two knobs take
# compute from their own rank, which a GPU's host-side loader and writer would not.
# **B13** (an emulated straggler on two ranks) measures the share of the straggler's delay that
# reaches the job's step. A synchronous all-reduce waits for every rank (DDP's documented
# semantics), so the row is true by construction: *shown* when at least half of the delay
# reaches the job over the whole interval, the timing its size; a timing below leaves it open
# on this machine, never refutes the semantics.
# B13's clock figures are checked against each other (the article's own arithmetic: its 8% may
# not pass what the clock drop allows), its advice to lock the SM clock against NVML's
# documentation of the call (documented specification), and the stable speed it promises is not
# checkable (no spread is shown, no clock to lock here). The bucket rung uses DDP's `bucket_cap_mb` and
# flags as the article's step 2 does, though its run is ZeRO-2, where they do not apply (chapter
# 05's B8 row); the format rung uses memmap, not the article's tar shards, which chapter 06 finds
# the slowest warm reader here, so the rung cannot speak for tar.

# %%
claim_list, headline = o.claims, o.metrics
verdicts.publish_claims(out, o.claims, o.metrics)  # tables/claims.csv: the full table
display(Markdown(verdicts.claims_markdown(o.claims)))

display(Markdown(stability_note(out)))

# %% [markdown]
# ## What this study showed

# %%
comm = agree[agree.category == "communication wait"]  # the profiled steps, both ways of splitting them
split_comm = o.tables["b2_split"].set_index("category").loc["communication wait"]
display(
    Markdown(
        "\n".join(
            [
                f"* In the naive step, communication wait is **{headline['naive_comm_wait_share']:.1%}** by the "
                f"timestamps (mean over {job['world_size']} ranks, which differ by "
                f"{split_comm.spread_over_ranks:.1%} of the step: the faster rank waits for the slower; its "
                "spread between fresh runs is in the stability note above. On the profiled steps "
                f"{comm.timestamps_share.mean():.1%} by the timestamps, {comm.profiler_share.mean():.1%} by "
                "torch.profiler, which books autograd's gaps inside the backward and the hook's dispatch as "
                "communication: two definitions of the same wait, not an interval) and data "
                f"wait **{headline['naive_data_wait_share']:.1%}** of the step.",
                (
                    f"* The article's §5.2 knobs, one at a time (naive → {art['last']}): ×{art['speedup']:.2f} "
                    f"[{art['speedup_lo']:.2f}, {art['speedup_hi']:.2f}] (this run's rounds alone "
                    f"[{art['within_lo']:.2f}, {art['within_hi']:.2f}]; the wider interval adds the assumed "
                    f"{art['drift']:.0%} run-to-run drift)"
                    + (": no gain beyond the drift shown" if art["change"] == "inconclusive" else "")
                    if (art := o.values["article_ladder"])
                    else "* The article's §5.2 knobs were not run"
                )
                + (
                    f"; §5.3's checkpoint spike (a block's slowest job step over its median) "
                    f"{sp['synchronous']['spike_s'] * 1e3:.1f} ms synchronous → "
                    f"{sp['background']['spike_s'] * 1e3:.1f} ms in the background (the article's 3 s → 0.3 s)"
                    if (sp := o.values["checkpoint_spike"])
                    else ""
                )
                + (
                    f"; §5.3's background checkpoint saves {ck['gain_s'] * 1e3:.1f} ms per step at this run's "
                    f"one write per {ck['run_period_steps']} steps, {ck['gain_at_period_s'] * 1e3:.2f} ms at one "
                    f"per {ck['period_steps']} (Hugging Face Trainer's default)"
                    if (ck := o.values["checkpoint_knob"])
                    else ""
                )
                + f"; every knob at this run's period: {headline['naive_step_s'] * 1e3:.1f} → "
                f"{headline['best_step_s'] * 1e3:.1f} ms (×{headline['ladder_speedup']:.2f} "
                f"[{headline['ladder_speedup_lo']:.2f}, {headline['ladder_speedup_hi']:.2f}])"
                + f"; ceiling utilisation (model FLOPs over the measured matmul ceiling, not MFU against a peak) "
                f"{headline['naive_mfu']:.1%} → {headline['best_mfu']:.1%} of the calibration's ceiling "
                f"({headline['matmul_ceiling_flops_per_s'] / 1e9:.0f} GFLOP/s); the last rung is "
                f"{headline['best_mfu_vs_ceiling_now']:.1%} of the ceiling re-timed right after the job "
                f"({headline['ceiling_now_flops_per_s'] / 1e9:.0f} GFLOP/s: a shared box's ceiling moves).",
                f"* One rank slowed down by {job['straggler']['delay_s'] * 1e3:.1f} ms on every second step "
                f"({(b13 := o.values['b13'])['delay_share']:.0%} of the median step without it) made the whole job's step "
                f"×{headline['straggler_slowdown']:.3f} longer on those steps ({b13['reached']:.0%} of the "
                "delay reached the job: 1 + the median rise over the step before, over the median step off).",
                summary_line(claim_list),
            ]
        )
    )
)
