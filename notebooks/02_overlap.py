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
# # 02 · Communication/computation overlap: what a collective costs and how much overlap hides
#
# Data-parallel training ends every step with an all-reduce of the gradients. If it runs
# after the backward pass, the devices idle for its whole duration; if it is cut into chunks
# that start as soon as their gradients exist, it hides behind the rest of the backward
# pass. This notebook
#
# 1. measures the collectives on this machine in the spirit of **nccl-tests** (algbw, busbw,
#    a correctness check of every result; busbw is claim **B9**) and the machine's **α–β**
#    cost model against them;
# 2. overlaps chunked all-reduces with compute, serial vs k chunks, with a **timeline** (**A3**);
# 3. sweeps k and measures the **communication time per step** — whether 16 chunks
#    communicate longer than 4, and how much of the difference the per-call cost explains (**A5**);
# 4. checks the articles' numbers at their scale, with a sensitivity table for every assumed
#    input (**A4**, **A5**, **B9**), and sweeps the compute ÷ communication ratio for A18's yardstick
#    (B9's busbw sentences are checked here; its step sentence, "4% faster, MFU 48% → 52%", is
#    chapter 01's row under the same id, docs/claims.md);
# 5. counts where tensor parallelism's all-reduce sits in an MLP under PyTorch's own TP (**A2**);
# 6. reads article B's block of NCCL environment variables line by line against the
#    documentation of what reads each variable (**B16**).
#
# **The one formula.** Split a compute of C seconds that produces S bytes into k chunks, each
# chunk's all-reduce starting when its chunk is ready and the previous call has finished (one
# channel). With c = C/k per chunk and m = t(S/k) per call (the ring's 2(n−1)α latency plus its
# bandwidth term), the step is
#
#     T(k) = c + (k − 1)·max(c, m) + m,     and the communication per step is M(k) = k·m.
#
# Worked with article A's own numbers (§2.2: 20 ms of compute, 10 ms of communication per layer,
# 30 ms serial) and, for illustration, 0.5 ms of latency per call: at k = 4, c = 5 ms and
# m = 2.5 + 0.5 = 3 ms, so T = 5 + 3·5 + 3 = 23 ms (the ideal is max(20, 10) = 20 ms) and
# M = 12 ms; at k = 16, c = 1.25 ms and m = 0.625 + 0.5 = 1.125 ms, so T = 1.25 + 15·1.25 +
# 1.125 = 21.1 ms while M = 18 ms. More chunks hide more (A3), and each call's latency makes the
# communication itself longer (A5): both sentences of the article come out of the one formula,
# which `alpha_beta.chunked_overlap` computes (with the measured c and the calibrated α–β).
# The same numbers say more than the article does: while m < c the step is 20 + 10/k + 0.5 ms,
# so it keeps shrinking up to k = 20, where m reaches c. Longer communication (A5, §6.3) is not
# a slower step (§2.2's "反而会拖慢速度", *ends up slowing things down*) until the calls' latency
# outgrows the chunk of compute that hides them.
#
# Every rank runs under `torchrun` (gloo on CPU, NCCL on GPUs), started by `mfulab.measure.launch`
# with a timeout that kills the whole process group. Every (variant, k) is timed
# **interleaved**: each round runs all of them once in a shuffled order, so drift hits all
# alike, and comparisons are paired over the rounds with an interval widened for run-to-run
# drift.
#
# **What one GPU can show.** A collective needs at least two ranks and NCCL needs one GPU
# per rank, so a single-GPU machine has no accelerator collective to measure: its `gpu`
# profile runs the host's gloo ranks (as `cpu` does) and says so in the device line below;
# the `node` profile (8 GPUs) measures NCCL. There, compute and communication do **not** run
# on separate engines: NCCL's collectives are kernels that occupy SMs (one block per channel)
# and read and write device memory, so the compute kernels they overlap with get fewer SMs
# and less memory bandwidth and run slower. Overlap is never free; the *emulated* compute
# below (a wait that takes no resources) is the ideal case, an upper bound on what it hides.

# %% tags=["parameters"]
params = {}  # the profile's values (papermill injects them); empty: the defaults, the laptop profile
out_dir = ""  # set by the runner; empty: scratch/overlap
from_dir = ""  # analyse measurements from this folder instead of measuring

# %%
import pandas as pd
from IPython.display import Markdown, display

from mfulab.studies.overlap import a4_bound, a5_intervention, ab_regime, claims, figures
from mfulab.studies.overlap.stated import A3_K, A5_REASONABLE_STEP_SHARE
from mfulab.studykit import plots, verdicts
from mfulab.studykit.notebook import setup, stability_note
from mfulab.studykit.step_error import step_model_error_line
from mfulab.studykit.verdicts import summary_line
from mfulab.units import MIB, si

out, p, records = setup("overlap", params, out_dir=out_dir, from_dir=from_dir)
o = claims.outcome(records, p)  # every table below, the claims and the headline metrics, computed once
o.save_tables(out)
print(f"{records['collectives']['world_size']} ranks on {records['device_name']} ({records['device']})")

# %% [markdown]
# ## 1 · What a collective costs
#
# For a message of S bytes taking t seconds, nccl-tests reports **algbw = S/t** and
# **busbw = algbw × bus factor** — 2(n−1)/n for all-reduce, (n−1)/n for all-gather and
# reduce-scatter, 1 for broadcast — so that busbw can be compared with the bandwidth of the
# slowest link whatever the number of ranks. Every result is checked element by element
# (`#wrong`, as nccl-tests' `-c`). The table below has nccl-tests' columns:

# %%
coll = o.tables["collectives"]
assert coll.wrong.sum() == 0, "a collective returned a wrong result"
print(o.values["nccl_tests_text"])

# %% [markdown]
# **The machine's α–β.** The ring all-reduce costs t = 2(n−1)·α + 2(n−1)/n·S/B: every call
# pays 2(n−1)·α before a byte moves, and S/B grows with the message. The machine's
# calibration (`mfulab.measure.calibration`, one per machine) measured α and B once; **every model
# in this notebook uses those two numbers**. Below they are compared with this run's
# all-reduce times, size by size, and — as a check only — with the same fit
# (`comm.fit_alpha_beta`) of this run's times. The verdicts of A3 and A5 rest on this run's
# measured steps, not on either fit. B is the all-reduce's *effective* bandwidth: on a CPU it
# includes gloo's copies and the reduction itself, which likely explains why a broadcast
# (nothing to add) reaches a higher busbw in the figure below. The bus factors assume a
# bandwidth-optimal ring, as NCCL runs: gloo's all-gather and reduce-scatter fall well below its
# all-reduce's busbw here (a reduce-scatter can take longer than the all-reduce that contains it),
# so on gloo busbw compares ops only loosely; why, gloo's implementation of those two ops, is not
# measured in this run.

# %%
fit, n_ranks = o.values["alpha_beta"], records["collectives"]["world_size"]
ab = o.tables["alpha_beta_check"]
check = o.tables["alpha_beta_fit_check"].set_index("check: this run's fit vs the calibration")
diff = check["relative difference"]
display(
    Markdown(
        f"* **the machine's α–β** (calibration, `{records.get('calibration', {}).get('file', 'this run')}`): "
        f"α = **{fit['alpha_s'] * 1e6:.0f} µs** per ring step, so a call costs 2(n−1)α = "
        f"**{o.values['per_call_s'] * 1e3:.2f} ms** before a byte moves (n = {n_ranks}); "
        f"B = **{si(fit['link_bytes_per_s'], 'B/s')}**\n"
        f"* against this run's all-reduce times that model is off by {ab.model_error.min():+.0%} to "
        f"{ab.model_error.max():+.0%} (median {ab.model_error.median():+.0%}), size by size below\n"
        f"* where a cluster's messages live (beyond the cache), {ab_regime.regime_sentence(o.values['ab_regime'])}\n"
        f"* *check: this run's fit vs the calibration*: fitted the same way, this run's times give α "
        f"{diff.iloc[0]:+.0%} and B {diff.iloc[2]:+.0%} relative to the calibration (table below); "
        "the calibration stands for the machine, this run is one job."
        + (
            f"\n* the calibration's own fresh jobs put α anywhere in {min(jobs) * 1e6:.0f}–"
            f"{max(jobs) * 1e6:.0f} µs ({len(jobs)} jobs): on this box the α–β model is illustrative, "
            "not predictive: A3's and A5's effects are read off measured steps, and A5's mechanism row "
            "carries this spread"
            if len(jobs := [j["alpha_s"] for j in (records.get("alpha_beta") or {}).get("jobs") or []]) > 1
            else ""
        )
    )
)
display(check.round(3))
ab.set_index("size_bytes")[["measured_s", "model_s", "model_error"]].rename(
    columns={"model_s": "calibration model_s", "model_error": "calibration model error"}
)

# %%
llc = records.get("last_level_cache_bytes") if records["device"] == "cpu" else None
fig = figures.plot_busbw(o.tables["collectives"], fit, o.values["crossover_bytes"], llc)
plots.save_figure(fig, out, "busbw")

# %% [markdown]
# **Small messages on a CPU.** Left of the dotted line a message and gloo's copies of it fit in the
# host's last-level cache, so a call's time is its latency and the scheduling of gloo's threads,
# not DRAM traffic; on a 2-core box those threads wait for a core the other rank holds, which is
# why the small sizes' quartiles are wide and why one size can read slower than a larger one (the
# collectives table's q1/q3). Where more than half of a size's samples take such a wait, the
# size's median drops in busbw: the sizes where that happened in this run are listed below, with
# the wait. The dotted line is the cache the system reports; on a VM the copies can stay partly
# cache-served several times beyond it (the calibration's cache floor), so only the largest sizes
# approach the link.

# %%
display(Markdown(o.values["stalled_sizes_text"]))

# %% [markdown]
# **The same benchmark on GPUs**, as published (nccl-tests' own `all_reduce_perf`; each row's
# source, the largest message of its sweep, its NCCL version and year in the table; the same list
# chapter 10 reads): NVLink reaches about two thirds to four fifths of its line rate on a ring,
# and InfiniBand gets within a few percent of its ports. NVLink SHARP (NVLS) on H100/H200 passes
# the per-direction line rate because the switch does the reduction and fewer bytes cross each
# link than busbw's ring formula counts: its rows are an algorithm's gain over the ring, with no
# share of the link (`busbw_over_line` empty). `times_this_machine` is each figure over this
# run's largest all-reduce busbw.

# %%
o.tables["nccl_tests_published"]

# %% [markdown]
# ## 2 · Serial vs overlapped: the timeline (A3)
#
# Each chunk of the tensor is produced by compute, then all-reduced with `async_op=True`
# while the next chunk computes. When each all-reduce finished is recorded by a future
# callback on gloo, and by CUDA events around it on its own stream on NCCL (whose future
# completes when the call is enqueued). With k = 1 nothing overlaps: the step is compute +
# communication. The compute time is a multiple (`compute_over_comm`) of the tensor's one-shot
# all-reduce measured at the start, the claim's 20 ms of compute per 10 ms of communication.
# **Emulated compute** is a timed wait — the ideal accelerator: time passes, nothing is taken
# from the communication. **Real compute** is matmuls: on a CPU run on the host's cores, which
# gloo's communication threads need too; on a GPU run bf16 matmuls on the GPU, sized to each
# chunk's share, which share the GPU with NCCL's kernels.

# %%
ov = records["overlap"]
display(
    Markdown(
        f"One-shot all-reduce of {p.overlap_bytes / MIB:.0f} MiB at the start: "
        f"**{ov['one_shot_comm_s'] * 1e3:.1f} ms** → compute per step **{ov['compute_s'] * 1e3:.1f} ms** "
        f"({p.compute_over_comm:g}×); {ov['rounds']} interleaved rounds per compute mode."
    )
)
timeline_mode = "emulated" if "emulated" in p.modes else "real"
# the k A3 is judged at (fixed before any timing), not the best k of this run
fig = figures.plot_timeline(records, timeline_mode, A3_K)
if fig is not None:
    plots.save_figure(fig, out, "timeline")

# %% [markdown]
# ## 3 · Step time vs k: measurement and model
#
# The model (`alpha_beta.chunked_overlap`) takes the measured compute-only time, the tensor size
# and the calibrated α–β. Exposed communication is the median over rounds of overlapped − compute
# only in the same round, not the difference of the two medians, so the columns need not subtract.

# %%
ot = o.tables["overlap"]
assert records["overlap"]["wrong"] == 0, "an overlapped all-reduce returned a wrong result"
fig = figures.plot_step_vs_k(ot, o.values["a3"])
plots.save_figure(fig, out, "step_vs_k")
ot[["compute", "k", "overlapped_s", "compute_only_s", "comm_only_s", "exposed_comm_s", "model_step_s"]]

# %%
a3 = o.values["a3"]
lines = [
    f"* {m} compute: serial {r['serial_s'] * 1e3:.1f} ms → {r['overlapped_s'] * 1e3:.1f} ms at k = {r['k']}, "
    f"bound max(compute, comm) {r['bound_s'] * 1e3:.1f} ms: **{r['recovered_text']}**"
    for m, r in a3.items()
    if r
]
lines.append(
    "\n(Share of the possible saving = (serial − overlapped) ÷ (serial − bound), from the medians "
    "shown; the timeline above draws one example step of each k, the numbers here are medians.)"
)
stretch = [f"{m} {r['comm_stretch'].ratio:.2f}×" for m, r in a3.items() if r and r["comm_stretch"]]
if stretch:
    lines.append(
        "\nThe all-reduces' time in flight inside the overlapped step, over their time alone at the same "
        f"k (measured, medians of paired rounds): **{', '.join(stretch)}**. Above 1, the compute slowed "
        "the communication it overlapped."
    )
display(
    Markdown(
        "\n".join(lines)
        + (
            f"\n\nEach rank's matmuls run on {records['overlap']['intra_op_threads']} intra-op thread "
            f"(`torch.set_num_threads`) of the {records['overlap']['usable_cores']} cores the job may use; "
            "gloo's own threads come on top, on the same cores."
            if "intra_op_threads" in records["overlap"]
            else ""
        )
        + "\n\nWhere real compute recovers much less than emulated compute, the cause is "
        + (
            "the cores: every rank's matmuls and gloo's send/receive threads share the host's cores, "
            "so communication progresses only when compute yields."
            if records["device"] == "cpu"
            else "NCCL's kernels: they take SMs and memory bandwidth from the compute they overlap "
            "(the overlap table's compute_slowdown_under_comm says by how much on this GPU)."
        )
    )
)

# %% [markdown]
# **Between the two engines.** Emulated compute leaves the cores to gloo (an engine whose
# collectives cost its compute nothing); real compute takes both cores gloo's threads need.
# An accelerator sits between them: NCCL's kernels take a few SMs and some memory bandwidth,
# not the whole engine. The contention sweep runs each chunk's compute as real matmuls for a
# share of its interval (the duty cycle) and a timed wait for the rest, at k = 1 and k = 4,
# interleaved (`a3_rows.duty_table`; duty 0 and 1 are the two modes above). Where on this axis
# a given GPU's overlap falls is that device's to measure (`make check-gpu` runs the real mode
# on NCCL); the sweep shows how fast the recovered share falls as compute takes the cores.
#
# **So A3 is two rows.** The mechanism (overlap takes the step toward max(compute, comm)) is shown
# by the ideal engine, with the sweep beside it. How much an accelerator recovers is inconclusive
# on this machine: the two ends of the sweep are its bracket, and where a GPU falls between them is
# the GPU's to measure.

# %%
duty = o.tables["a3_duty"]
display(duty if not duty.empty else Markdown("No contention sweep in this run (CPU runs only)."))

# %% [markdown]
# ## 4 · Communication time per step vs k (A5)
#
# The claim is about the *communication*, not the step: k chunks mean k calls, and every
# call pays the per-call cost 2(n−1)·α again, so the communication per step is
# k·2(n−1)·α + (bus factor)·S/B — the bandwidth part does not depend on k, the per-call
# part grows with it. Measured here two ways: the step's all-reduces alone, and the time
# during which communication was in flight inside the overlapped step (in real mode it includes
# the slowdown from sharing the cores, on gloo, or the GPU, on NCCL, with compute). The
# all-reduces alone at k = 4 and 16 also run `a5_rounds` rounds of their own after the sweep:
# on a shared CPU a 16-chunk step's rounds are bimodal (about a third run at the 4-chunk time),
# and the sweep's rounds alone left the median ratio's interval touching 1 in one of three runs.

# %%
fig = figures.plot_comm_vs_k(o.tables["comm_per_step"], o.values["a5_gap"], o.values["a5_intervention"])
plots.save_figure(fig, out, "comm_vs_k")
a5 = o.values["a5"]
o.tables["a5_comparison"]

# %% [markdown]
# **What the per-call cost explains.** A5 is two claims: the *effect* (16 chunks
# communicate longer than 4: the table above) and its *mechanism* (each call's fixed cost is
# why). If the fixed cost per call were the whole story, 12 more calls would add
# 12 × 2(n−1)·α to the communication per step — the α–β model's prediction, with the
# calibration's α; single calls of the two chunk sizes, timed in this run's benchmark, give a
# second prediction that also counts any bandwidth lost at the smaller size. Whatever the
# measured gap holds beyond both is not the cost of a call. Predictions are not a test, so the
# A5 rounds also run an intervention: k = 4 followed by 12 all-reduces of one element each, the
# 12 extra calls' fixed cost with none of their bytes (`a5_intervention.a5_intervention`). If the
# fixed cost is why, that step takes as long as k = 16; the share of the gap it reproduces
# decides the mechanism row, and the predictions are printed beside it. The mechanism also
# needs the article's regime: whether a 16-chunk call is dominated by its per-call cost. On the
# sweep's 16 MiB it is (about half of each call), at the article's 200 MB it is not (about a
# tenth), so the intervention runs again on a tensor of `a5_regime_bytes` (160 MiB), where this
# box's per-call share is near the article's; there it compares k = 4 with k = 64
# (`a5_regime_chunks`: k = 4 plus 60 one-element calls), whose gap stands clear of this box's
# noise while a 64-chunk call stays bandwidth-dominated. That pass decides the row, the 16 MiB
# one illustrates the mechanism where it is large.

# %%
iv, ivr = o.values["a5_intervention"], o.values["a5_intervention_regime"]
display(
    Markdown(
        (f"Measured in the article's regime: {a5_intervention.text(ivr)}.\n\n" if ivr else "")
        + (f"Measured: {a5_intervention.text(iv)}. " if iv else "")
        + (f"Predicted: {o.values['a5_cause']}." if a5 else "k = 4 and k = 16 were not both measured.")
    )
)

# %% [markdown]
# ## 5 · The articles' scale (A4, A5, A18, B9)
#
# **A4 first without the step model.** Overlap saves only the communication it hides. Two bounds
# need no step model's compute or hidden shares, only the links' α–β prices:
# * the gradient buckets hide only under the last micro-batch's backward, at most ⅔ of its
#   compute, even were the whole 2.1 s overlapped step compute (overlap does not change the
#   compute, and that step holds all of it: `a4_bound.a4_grad_overlap_bound`);
# * a chunked TP all-reduce that the next layer waits for cannot hide its last chunk, a whole
#   call's latency plus 1/k of its transfer (`exposed_share.last_chunk_s`), at the article's
#   largest k = 8; and it hides only under the GEMMs that run beside it, the row-parallel GEMMs
#   that produce it forward and the weight-gradient GEMMs backward, a third of a layer's linear
#   FLOPs without sequence parallelism (`a4_bound.TP_GEMM_WINDOW_SHARE`, derived there): at most
#   0.7 s even were the whole 2.1 s step GEMMs. With sequence parallelism, which the article's
#   command does not set, the window would be larger.
#
# Their sum (`a4_bound.a4_saving_bound`) is the most the article's overlap can save, against the
# 3.2 − 2.1 = 1.1 s it reports. Where it stays under 1.1 s in every reading, A4 is refuted by
# analysis; where a reading lets it through, the step model below decides. The table gives each
# reading in seconds per step.

# %%
a4_bound.a4_bound_table(o.values["a4_bound"]).round(3)

# %% [markdown]
# **A4** is priced by the course's one step model (`step.step_time`, chapter 09) on the
# article's own cards (`article_device`: the 910B's `devices.yaml` entry, its peak, HBM, HCCS
# inside a node and 200 Gb/s RoCE between nodes): the 13B run with TP = 8 on 32 cards, once with
# nothing overlapped and once with the overlap the article describes for this run (§2.1–2.2):
# each layer's TP all-reduce cut into chunks under the computation (at the step model's
# `tp_overlap_share` of it, not all), the gradient buckets under the backward. The 32-card run's
# flags are not stated. The 8-card command of §6.1 names only the gradient overlap, and
# Megatron-LM itself refuses `--tp-comm-overlap` without `--sequence-parallel` (its
# `validate_args`); MindSpeed, which the article runs, ships its own TP overlap, so that reading
# (the TP all-reduces exposed) is a row of the sensitivity table, not the stated case. The model issues Megatron's tensor-parallel all-reduces of the
# b·s·h activations — 2 in the forward and 2 in the backward pass of every layer and
# micro-batch (Shoeybi et al. 2019, Fig. 4; Narayanan et al. 2021, §3.2) — and the DP
# framework's gradient buckets, each call priced by NCCL's latency model; the GEMMs run at
# `article_matmul_share_of_mamf` of the device's best GEMM. **A5** prices its calls the same
# way, by NCCL's cost model (`alpha_beta.a5_call`: the faster of ring and tree, the step model's
# latencies) over A4's own layout, the same 32-card run: TP 8 fills each of the 4 nodes, so
# the gradients reduce over 4 DP ranks, one per node, on the stated link
# (`article_link_bytes_per_s`: 25 GB/s, the 910B's 200 Gb/s RoCE port per card in
# `devices.yaml`; article B §3.3 calls 25 GB/s the "physical limit" of such a port). Pure data
# parallelism over the 32 cards, and a ring alone with 2–20 µs per step (`article_alpha_s`, the
# α–β model this chapter measures), are sensitivity rows. Each table varies one assumed input at
# a time and says whether the reading survives; `step_at_scale.a4_flip_link` finds the intra-node bandwidth at
# which A4's reading changes.
#
# **The rule for A4.** The stated case (the article's own description) decides, unless an input
# the article leaves unstated (a row of kind *assumed input*: the latencies, the links, the GEMMs'
# share of MAMF, the attention kernel, the DP framework the ambiguous `--zero-stage 2` names,
# which overlap the 32-card run had on, and its TP × PP sharding, which it does not state: TP 8
# is the 8-card command's) reverses it (`verdicts.at_stated_case`); rows of kind
# *other configuration* (another micro-batch or recompute, bf16 gradients) change what
# was run and are named beside the verdict, not voted. The claim's quantity is the saving, the
# serial step over the overlapped one (3.2 ÷ 2.1 = 1.52×), and the step model's decisive margin
# (`studykit.step_error.SWITCH_MARGIN`) is its error on such a ratio: a case reproduces the
# article when its modelled ratio lies within the margin of 1.52× and beyond it from 1 (a saving
# the model can tell from its own error), misses it beyond the margin of 1.52×, and cannot tell
# otherwise; a case whose serial step lies beyond the margin of the stated 3.2 s is not a reading
# of the article and does not vote (`step_at_scale.a4_consistent`). Where the stated case cannot
# tell, the verdict is analytic only (the row's evidence gives each case).
#
# **One queue to the GPU.** Article B's launch script exports `CUDA_DEVICE_MAX_CONNECTIONS=4`.
# Megatron-LM refuses to start tensor parallelism with sequence parallelism or its asynchronous
# TP all-reduce unless the variable is 1 (its `validate_args`): with a single hardware queue the
# kernels run in the order they were launched, so the collective launched first is scheduled
# ahead of the GEMM it is meant to overlap. FSDP2, the other way round, asks not to set it to 1
# (Megatron warns when both are on). Overlap is a scheduling property as much as a flag.
#
# **One step model.** A4's compute, links and per-call latencies are the step model's (chapter
# 09), on the 910B's own table entry (HCCS inside the node, not NVLink). The step model prices
# the whole step without and with overlap, so it can be set beside the article's 3.2 and 2.1 s.
# The A4 row of the claims table gives both steps, the saving the model finds against the
# article's 1.1 s, and which communication could account for that 1.1 s.
# The gradients reduce in fp32, as Megatron (which the 910B's MindSpeed runs) does for bf16
# training unless told `--grad-reduce-in-bf16` (`megatron/training/arguments.py`).
#
# **Gradient accumulation in A4** is varied the way a run varies it: at a fixed global batch
# (32 sequences), a micro-batch b gives 32 / (b · dp) accumulation steps. Larger micro-batches
# mean fewer TP all-reduces per step, each of a larger b·s·h message: the bytes moved stay the
# same, only the per-call latency shrinks — bought with b times the activation memory per card.
# The step model's GEMMs grow with b, so the compute per step shrinks a little too. Accumulation does
# not enter A5: it changes how often the 200 MB tensor is reduced, not what one reduction costs.

# %%
display(Markdown(step_model_error_line()))
art = o.values["article_scale"]
o.tables["article_scale"]

# %% [markdown]
# Every input of the stated case's communication, per collective: the link the step model uses is
# `link_efficiency` × the table's figure, and a ring all-reduce pays 2(n − 1) steps of α plus its
# bus bytes over that link (`comm.ring_all_reduce_time`); the last columns are the step model's own
# seconds, which these re-derive. (`alpha_s` among the parameters is A5's sensitivity input; the
# step model's α per ring step is `rates.Assumptions`', NCCL's own latency model.)

# %%
o.tables["a4_collectives"].round(3)

# %%
a4_sens = o.tables["a4_sensitivity"]
with pd.option_context("display.max_colwidth", None):
    display(a4_sens)
flip = o.values["a4_flip_link"]
display(
    Markdown(
        f"The reading (*{flip['baseline_reading']}*) "
        + (
            f"changes at a TP link of {flip['flip_bytes_per_s'] / 1e9:.0f} GB/s per direction."
            if flip["flip_bytes_per_s"]
            else "does not change at any TP link between 10 GB/s and 1 TB/s per direction (a4_flip_link); "
            "the link at which the step model's saving reaches 1.1 s is the feasibility frontier of "
            "the A4 row, a different question."
        )
    )
)

# %%
a5_sens = o.tables["a5_sensitivity"]
a5_sens

# %%
fitting = a4_sens[a4_sens.fits != False]  # noqa: E712 (a layout that does not fit cannot run)
changed = fitting[~fitting.same_as_baseline]
display(
    Markdown(
        f"* **A4**: baseline reading *{art['a4_reading']}*; it survives in {int(fitting.same_as_baseline.sum())} "
        f"of {len(fitting)} rows that fit the card ({len(a4_sens) - len(fitting)} do not)"
        + (
            "; it changes with "
            + "; ".join(f"{r.varied} = {r.value} (*{r.reading}*)" for r in changed.itertuples())
            if len(changed)
            else ""
        )
        + ".\n"
        f"* **A5**: 16 chunks communicate longer than 4 in {int(a5_sens.k16_slower_than_k4.sum())} of "
        f"{len(a5_sens)} rows (by {a5_sens.ratio_16_over_4.min():.2f}× to {a5_sens.ratio_16_over_4.max():.2f}×: "
        "the per-call cost is never zero); every k of the article's 4–8 steps within "
        f"{A5_REASONABLE_STEP_SHARE:.0%} of the best k's in {int(a5_sens.range_reasonable.sum())} of "
        f"{len(a5_sens)} rows, and the best k itself is in 4–8 in "
        f"{int(a5_sens.best_k_in_4_to_8.sum())} of {len(a5_sens)}; on this machine "
        f"{o.values['step_best_k_text']}."
    )
)

# %%
o.tables["a5_steps_at_scale"]  # the model's step (s): 200 MB, balanced compute, per chunk count

# %%
o.tables["b9_check"]

# %% [markdown]
# **A18 against the compute ÷ communication ratio.** The article's criterion is the time the
# critical path waits for communication, the exposed share; it reads it off a profiler as the
# communication operators' share of the step. That figure has two readings: the operators' total
# time, which parts ways with the wait under overlap (a hidden all-reduce still runs its kernels,
# and hiding it shortens the step, so the share rises as the wait falls), and the non-overlapped
# time a profiler such as MindStudio also reports, which is the wait itself
# (`exposed_share.a18_profiler_claim`, at the article's 8 cards, TP 8: not checkable when the
# readings disagree, both in the evidence). The run repeats the serial step and one chunked step with
# emulated compute at several ratios (`a18_compute_over_comm`): the overlap engine and k do not
# change, only how much compute there is to hide behind. How much of the serial step's exposed
# time the chunked step removes is not the same at every ratio (the claims row gives it per
# ratio), so the sweep mixes two things: the overlap's quality and the ratio, which alone sets the
# no-overlap share at 1/(1 + ratio). The thresholds are therefore judged where the article states
# them (`exposed_share.a18_rule_decision`), and the sweep shows why they travel badly.

# %%
fig = figures.plot_a18_sweep(o.tables["a18_sweep"])
if fig is not None:
    plots.save_figure(fig, out, "a18_sweep")
o.tables["a18_sweep"]

# %% [markdown]
# ## 6 · Where tensor parallelism's all-reduce sits (A2)
#
# Article A §2.1 draws a TP MLP as a column-parallel linear, then a *data-parallel* all-reduce
# summing the cards' results, then a row-parallel linear. In Megatron's layout (Shoeybi et al.
# 2019 §3, Fig. 3a) the first linear's output stays split by columns, the GeLU and the second
# linear run on each card's own columns, and the one forward all-reduce sums the second
# linear's partial outputs inside the TP group; a data-parallel all-reduce moves gradients,
# once per step. Counted here on PyTorch's own TP (`parallelize_module`, `ColwiseParallel` →
# `RowwiseParallel`, every rank of the job) with DTensor's `CommDebugMode`, per linear and pass,
# the output gated against the same MLP run whole (`tp_layout.tp_mlp_collectives`).

# %%
o.tables["a2_collectives"]

# %% [markdown]
# **The article's pseudo-code (§2.2), two readings.** As its lines are written, the loop computes
# `x = column_parallel_linear(x)` whole, then records one event per chunk, then lets the
# communication stream all-reduce each chunk after its event, and makes the compute stream wait
# for the last all-reduce before `row_parallel_linear`: every event is recorded when the whole
# GEMM has finished, so no computation runs beside any all-reduce, at any k
# (`pseudo_code.as_written`). Its comment says the forward is computed chunk by chunk
# (按chunk计算), and the article calls the code simplified: read that way, it is the decomposed
# schedule, which overlaps all but the last chunk's all-reduce (`pseudo_code.decomposed`). The
# readings disagree, so the claims row is not checkable, with both; the code's real error is
# *what* it all-reduces (the row above). Overlapping a collective with the GEMM that produces it
# needs the GEMM itself split: chunk i's collective runs while chunk i + 1 is computed (Wang et al., ASPLOS 2023, "Overlap Communication with
# Dependent Computation via Decomposition"; Megatron-Core's `--tp-comm-overlap`, which needs
# `--sequence-parallel`), `pseudo_code.decomposed`. The chunked all-reduces of §3 overlap
# *independent* compute, as DDP's buckets do.

# %% [markdown]
# ## 7 · Article B's NCCL block (B16)
#
# Article B's §3.2 lists the environment it set for the multi-node run. Each line is a claim
# about a variable, and the question for each is the same: does the library the line names read
# that variable, and does it do what the line says? No run on this machine can measure an
# InfiniBand or GPUDirect effect, so every row reads the documentation (NCCL's environment
# variables page and source, PyTorch's and CUDA's docs), never a measured gain:
#
# * `TORCH_DISTRIBUTED_DETAIL=1`: no library reads it; PyTorch reads `TORCH_DISTRIBUTED_DEBUG`,
#   whose value `DETAIL` the line seems to have turned into a variable name;
# * `NCCL_BUFFSIZE`: the per-channel staging buffer between two GPUs, so a larger one does take
#   more memory; "more stable for big messages" has no documented or measured basis here;
# * `CUDA_DEVICE_MAX_CONNECTIONS=4`: the number of hardware work queues a process's streams share
#   (Megatron sets it to 1 so that its communication kernels are scheduled in issue order, §5);
# * `NCCL_IB_TIMEOUT=22`: the verbs timeout, 4.096 µs × 2^22 ≈ 17 s, so it does tolerate jitter;
# * `NCCL_IB_QPS_PER_CONNECTION`: queue pairs per connection, as stated;
# * `NCCL_NET_GDR_LEVEL` / `NCCL_NET_GDR_READ`: GPUDirect RDMA, whose gain the article measured
#   only inside a bundle of changes (11 → 21 GB/s busbw, §3.3), so its own share is not known;
# * `NCCL_IB_GID_INDEX`, `NCCL_SOCKET_IFNAME`: read by NCCL (the GID index in RoCE mode), given
#   no reason in the article.
#
# The rows below give each line's verdict with its source.

# %% [markdown]
# ## Claims
#
# Verdict words (the rule is `docs/claims.md`): *confirmed* / *refuted* when a measurement in the
# claim's regime, a cited figure, a specification, an exact count or the article's own arithmetic
# decides; *(analysis)* when an analysis at the article's configuration decides, and *analytic
# only* when the analysis cannot decide (a sensitivity row reverses it, the reading does, or the
# model's margin is wider than the effect); *shown* / *not shown* for a mechanism in a toy regime
# or a property true by construction; *inconclusive on this machine* where this machine cannot
# reach the regime and no analysis is made; *not checkable* when nothing can be tested or two
# readings of the sentence disagree. Each row names its basis. Each row's rule, once:
# * **A3, mechanism**: the overlapped step at k = 4 (fixed before any timing, `stated.A3_K`)
#   against the serial step, paired rounds: shown when it is shorter, inconclusive on this machine
#   otherwise (a toy regime cannot refute). On a CPU the ideal engine decides; on a GPU, real
#   compute (measured).
# * **A3, how much**: the recovered share, (serial − overlapped) ÷ (serial − bound), at the ideal
#   engine and at real compute: inconclusive on this machine, the two ends its bracket.
# * **A4**: first the bound without the step model (`a4_bound.a4_saving_bound`, section 5):
#   refuted (analysis) when it stays under the 1.1 s saved in every reading; otherwise the step
#   model's stated case decides within its error on a ratio (section 5's rule).
# * **A5, effect**: communication per step at k = 16 over k = 4, paired rounds: shown when the
#   drift-widened interval lies above 1.
# * **A5, mechanism**: the intervention (k = 4 plus 12 one-element calls): shown when the calls'
#   share of the gap lies within `a5_mechanism_min_share` and its inverse over its whole interval
#   (a bootstrap over rounds, widened by the share's own 5% drift) and a 16-chunk call is in the
#   article's regime (the 160 MiB pass decides); not shown when it lies under 1 − that share;
#   inconclusive otherwise.
# * **A5, at scale**: NCCL's cost model at 200 MB over A4's 4 DP ranks, two rows. "16 chunks
#   communicate longer than 4" holds in any α–β model (more calls, more per-call latency, the
#   same bytes): shown (by construction). "4–8 chunks are a reasonable range": confirmed
#   (analysis) when every sensitivity row finds every k of 4–8 within 5% of the best k's step
#   (`stated.A5_REASONABLE_STEP_SHARE`, assumed), refuted when none does, analytic only otherwise.
# * **A18**: each threshold as the conditional it states, where the article states it (one
#   machine, 8 cards, TP 8), over one sensitivity set (slower TP links, each reading of the
#   910B), on the quantity the article names as its only criterion, the time on the critical
#   path spent waiting for communication (判断标准只有一个：关键路径上还有多少时间花在"等通信"上).
#   "If the share can be pushed under 10%, the overlap is good" misgrades only where a step with
#   nothing overlapped reads under 10%. "Over 25% leaves room" holds where the last chunk's
#   floor, the least any overlap leaves exposed, lies under 25%. The profiler recipe that follows
#   the criterion, the operators' share of the step, is its own row: read as the operators'
#   total time it rises as overlap hides them, read as the time they leave exposed it falls; not
#   checkable when the two disagree.
# * **A2**: the exact count of collectives (section 6).
# * **B9**: nccl-tests' definitions, the A100 datasheet (12 NVLink 3 links of 25 GB/s per
#   direction) and the published healthy nodes above: 60% of the line rate is a bottleneck only
#   below each generation's best healthy node by more than 20%.
# * **B16**: each line of article B's NCCL block against the documentation of what reads the
#   variable: refuted when nothing reads it; confirmed when the line describes the variable as
#   documented (what it does, never a measured gain); not checkable when its stated gain is
#   measured nowhere or it gives no reason.

# %%
claim_list = o.claims
verdicts.publish_claims(out, o.claims, o.metrics)  # tables/claims.csv: the full table
display(Markdown(verdicts.claims_markdown(o.claims)))

display(Markdown(stability_note(out)))
# %% [markdown]
# ## What this study showed

# %%
largest = coll[coll.op == "all_reduce"].sort_values("size_bytes").iloc[-1]
lines = [
    f"* the machine's all-reduce over {n_ranks} ranks (calibration): α = {fit['alpha_s'] * 1e6:.0f} µs per "
    f"ring step, B = {si(fit['link_bytes_per_s'], 'B/s')}; every collective result checked "
    f"({int(coll.wrong.sum())} wrong). "
    + (
        f"Check: this run's busbw at {si(largest.size_bytes, 'B')} is "
        f"{largest.busbw_bytes_per_s / fit['link_bytes_per_s'] - 1:+.0%} against that B."
        if largest.size_bytes >= 10 * o.values["crossover_bytes"]
        else f"This run's largest message, {si(largest.size_bytes, 'B')}, is too small to check B."
    )
]
lines += [
    f"* {m} compute: serial {r['serial_s'] * 1e3:.1f} ms → {r['overlapped_s'] * 1e3:.1f} ms at k = {r['k']} "
    f"({r['recovered_text']})."
    for m, r in a3.items()
    if r
]
if "comm_only" in a5:
    g = o.values["a5_gap"]
    lines.append(
        f"* communication per step: k = 16 takes {a5['comm_only'].ratio:.2f}× the time of k = 4"
        + (
            f"; {iv['calls']} calls of one element each cost {iv['share']:.0%} [{iv['lo']:.0%}, {iv['hi']:.0%}] of "
            f"the gap (measured), the calibration's per-call cost predicts {g['alpha_share']:.0%}"
            if iv and g["gap_s"] > 0
            else f"; the calibration's per-call cost predicts {g['alpha_share']:.0%} of the gap"
            if g["gap_s"] > 0
            else ""
        )
        + f"; {o.values['step_best_k_text']}."
    )
lines.append(summary_line(claim_list))
display(Markdown("\n".join(lines)))
