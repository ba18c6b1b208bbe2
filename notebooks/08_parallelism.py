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
# # 08 · Parallel layouts: pipeline bubbles, ZeRO/FSDP, tensor and sequence parallelism, MoE
#
# A model that does not fit one card's memory, or a batch that takes one card too long, is
# split across cards. Four ways to split it, each with its own cost:
#
# - **data parallelism** copies the model and splits the batch; ZeRO / FSDP also split the
#   optimizer states, gradients and parameters (the *memory wall* → sharding), at the price of
#   gathering parameters when they are used;
# - **pipeline parallelism** splits the layers into stages; micro-batches keep the stages busy,
#   except in the *bubble* at the start and end of each step;
# - **tensor parallelism** splits each matmul over the cards of a layer, with collectives on
#   the critical path of every layer; **sequence parallelism** splits what TP leaves whole;
# - **experts** (MoE) route each token to a few of many MLPs on other cards: all-to-all.
#
# This notebook measures each with PyTorch's own implementation on this machine's ranks
# (`torch.distributed.pipelining`, FSDP2 `fully_shard`, DTensor `parallelize_module`,
# `all_to_all_single`), sets each against its formula (`mfulab.analytic.parallel`, `mfulab.analytic.memory`),
# then sizes the claims at the articles' scale with the layout planner (`mfulab.analytic.layouts`).
# Claims: **A10, A11, A12, A13, A15, B10**.

# %% tags=["parameters"]
params = {}  # the profile's values (papermill injects them); empty: the defaults, the laptop profile
out_dir = ""  # set by the runner; empty: scratch/parallelism
from_dir = ""  # analyse measurements from this folder instead of measuring

# %%
from IPython.display import Markdown, display

from mfulab.studies.parallelism import analysis, claims, eight_cards, figures
from mfulab.studykit import plots, verdicts
from mfulab.studykit.notebook import setup, stability_note
from mfulab.studykit.step_error import step_model_error_line
from mfulab.studykit.verdicts import summary_line

out, p, records = setup("parallelism", params, out_dir=out_dir, from_dir=from_dir)
o = claims.outcome(records, p)  # every table below, the claims and the headline metrics, computed once
o.save_tables(out)
t = o.tables
print(
    f"{records['device_name']} ({records['device']}); pipelines on {list(p.pipeline_ranks)} ranks, the rest on {p.ranks}"
)

# %% [markdown]
# ## 1 · Pipeline bubbles (A13)
#
# With p stages and m micro-batches, every stage idles for p − 1 micro-batch slots per step
# (fill and drain): bubble / compute = (p − 1)/m for GPipe and 1F1B alike (1F1B keeps p
# micro-batches in flight instead of m, so it needs less memory, not less time). The
# interleaved schedule gives each rank v smaller chunks: the bubble falls to (p − 1)/(v·m),
# but every micro-batch now crosses v times as many stage boundaries (Narayanan et al. 2021,
# §2.2). Here each layer's forward and backward **sleep** (emulated stage compute: time passes,
# no core is busy, so 4 ranks on 2 cores behave like 4 accelerators). Each slot of the
# pipelined step also pays a fixed overhead — the point-to-point send and receive, the
# schedule's bookkeeping and the sleeps' own overshoot — fitted per schedule from the m sweep
# (`slot_overhead_s`); the dotted lines add it, and `model_error` is the measured bubble over
# that model, minus 1. `p2p_messages` counts the sends and receives of one step on all ranks
# (profiler), against 4·m·(p·v − 1): each micro-batch crosses p·v − 1 chunk boundaries forward
# and backward. Where the overhead is large next to the bubble it saves, interleaving does not pay.

# %%
pipe = t["pipeline"]
fig = figures.plot_bubble(pipe)
plots.save_figure(fig, out, "bubble")
cols = ["ranks", "compute", "schedule", "m", "v", "step_s", "ideal_s", "bubble_measured", "bubble_formula"]
pipe[
    cols + ["slot_overhead_s", "bubble_modelled", "model_error", "p2p_messages", "p2p_messages_formula"]
].round(4)

# %%
fig = figures.plot_timeline(records)
plots.save_figure(fig, out, "pipeline_timeline")

# %% [markdown]
# **Memory: 1F1B against GPipe.** The same timestamps say how many layer activations each rank
# held at once: a layer's forward stores them, its backward frees them, so the running count
# of forward starts minus backward ends peaks at what the schedule keeps in flight (emulated
# compute, where every layer logs both; counted exactly, in units of one layer for one
# micro-batch). GPipe runs every forward first: the first rank peaks at m·L. 1F1B starts a
# backward as soon as one micro-batch has crossed the pipeline: rank r holds p − r
# micro-batches. Interleaving adds (p − 1)/(p·v) of that. Beside it, the step model's schedule
# term (`parallel.pipeline_schedule_costs`, the factor its memory check uses, capped at the m
# micro-batches a step has: uncapped, it counted 22 layer activations for the interleaved
# schedule at m = p where this table counted 16, which is why the cap is there).

# %%
t["pipeline_memory"]

# %% [markdown]
# The real-compute rows (Linear + tanh layers, one thread per rank) are shown for completeness:
# on a CPU a stage's compute is short next to gloo's point-to-point messages, so the overhead,
# not the bubble, dominates them; they do not enter the verdicts.
#
# **At the articles' scale**: the planner (`layouts.plan`, which prices every layout with the
# course's one step model, `step.step_time`, validated in chapter 09), on article A's own card,
# the 910B, and on the A100 (`stated.AT_SCALE_DEVICES`: devices.yaml's figures with their links;
# the A100 is the step model's best-validated card) for a model as wide as Llama 2 70B cut to 40
# and 80 layers, on 512 cards with a global batch of 512 sequences: its best layout without
# interleaving, and the same layout with v = layers per stage / 2 (the article: "not at ~40
# layers; clearly above ~80"; 2 layers per virtual stage). Only v changes between the two.

# %%
t["a13_interleaving"].round(3)

# %% [markdown]
# The layer count is not the only input: at a fixed layout the bubble is (p − 1)/(v·m) of the
# compute, so the micro-batches per step, m, decide how much interleaving can save, while its
# extra point-to-point messages grow with m. The article's own 40-layer 13B at one pipeline
# layout (`stated.A13_M_SWEEP`: TP 8, PP 4, DP 2 on 64 cards; our choice, the article names none),
# m swept:

# %%
t["a13_m_sweep"].round(3)

# %% [markdown]
# ## 2 · ZeRO and FSDP: memory against traffic (A12)
#
# DDP keeps the whole model, its gradients and AdamW's two moments on every rank (fp32 here:
# 4 + 4 + 8 bytes per parameter) and all-reduces Ψ gradients per step, which a ring moves as a
# reduce-scatter plus an all-gather: 2Ψ. FSDP2 with `reshard_after_forward=False` shards
# gradients and optimizer states and keeps gathered parameters from forward to backward; fully
# sharded (ZeRO-3) gathers them again for backward: 3Ψ per micro-batch (Rajbhandari et al.
# 2020, §7). The bytes below are **counted**: each rank's local shards, DDP's buckets through a
# communication hook, FSDP2's all-gathers and reduce-scatters from the profiler's `c10d` ops.
# With gradient accumulation FSDP2 reduce-scatters every micro-batch (as DeepSpeed does at
# stages 2–3; `set_requires_gradient_sync(False)` would defer it, keeping whole gradients, as
# DDP's `no_sync` does here), and it re-gathers parameters every micro-batch: 2mΨ without
# resharding, 3mΨ with; DeepSpeed's ZeRO-2 gathers once per step, (m + 1)Ψ. Bytes are shown
# between steps (`held_bytes`) and at the end of the forward (`peak_bytes`), when FSDP2 without
# resharding still holds every parameter gathered for backward: ZeRO-2's peak, 4Ψ + 12Ψ/n.
# `traffic_elements` counts an all-reduce as 2 buffers (its reduce-scatter and all-gather), as
# ZeRO does; `gradient_gate` is the largest |gradient − DDP's gradient|.

# %%
fig = figures.plot_sharding(t["sharding"])
plots.save_figure(fig, out, "sharding")
t["sharding"]

# %% [markdown]
# **At scale** (planner, on the 910B and on A100s): Llama 2 13B on 512 cards (inside the article's range,
# 百亿参数模型、千卡规模以下: a model of the ten-billion class, 10¹⁰, on fewer than a thousand
# cards) and 70B on 1024 (past the card line), one sequence per card per step. For each:
# the best fitting layout with ZeRO 0–2, the best with ZeRO-3, and the best ZeRO 0–2 layout
# switched to ZeRO-3 (what its traffic alone costs) — at the planner's assumed DP overlap (0.8 of
# the compute a collective can run beside hides it) and with none: "ZeRO-3 needs overlap to pay
# off". Each ZeRO stage is priced with the framework that runs it (`framework`: Megatron's
# distributed optimizer for 0–1, DeepSpeed for 2, FSDP for 3: one all-gather forward, one
# backward and one reduce-scatter per block and micro-batch). Best-vs-best therefore mixes the
# stage with the framework, so two rows price both stages with one framework: FSDP2 at ZeRO-2
# (`reshard_after_forward` off) on the best ZeRO-3 layout, and the best ZeRO 0–2 layout at ZeRO-3
# in its own framework where that has a stage 3 (DeepSpeed). They separate what the stage costs
# from what a framework's schedule costs (DeepSpeed reduce-scatters every micro-batch).

# %%
t["a12_planner"].round(3)

# %% [markdown]
# ## 3 · Tensor and sequence parallelism (A10, A11)
#
# One block of the reference GPT: Q, K, V and the MLP's first linear column-parallel, the
# output projection and the MLP's second linear row-parallel (Megatron's layout); with sequence
# parallelism the LayerNorms run on sequence shards and the block's inputs are gathered, its
# outputs reduce-scattered (Korthikanti et al. 2022 §4.2.2). Outputs and gradients are checked
# against the block run whole; the collectives of one forward + backward are counted by
# DTensor's `CommDebugMode`; the activation bytes kept for backward are counted per rank and set
# against Korthikanti's Table 2 form (fp32, no dropout: the dropout half of the claim is not
# measured). PyTorch's column-parallel Q, K and V each all-reduce their input gradient (6
# all-reduces, not Megatron's 4 with a fused QKV); `elements_sent` is what each rank sends for
# them on a ring. With sequence parallelism PyTorch keeps the gathered inputs of the
# column-parallel linears for their weight gradients (Megatron keeps the shard and gathers again
# in backward): `korthikanti_plus_gathered_bytes` adds them. `max_abs_diff` is the largest
# |output or gradient − the whole block's|.

# %%
t["tensor"]

# %% [markdown]
# **A10 at the article's scale**: TP = 8 × DP = 16 on 128 cards. TP's collectives carry every
# layer's activations for every micro-batch; DP's carry each card's 1/8 of the gradients once per
# step. Bytes per device per step, and the planner with the TP group inside a node and spread
# over two nodes, on the article's 910B (HCCS inside a node) and on A100s (NVLink, InfiniBand).
# "Heaviest" (bytes) and "most latency-sensitive" are two rows: TP's bytes grow with the
# micro-batches a step accumulates and DP's do not, so the bytes half depends on a batch the
# 128-card case does not state. "Latency-sensitive" is read on its own quantity, the seconds each
# group's communication gains when every per-call latency doubles (`tp_added_by_latency_s`,
# `dp_added_by_latency_s`), beside the placement (across two nodes the TP time is mostly
# bandwidth).

# %%
display(t["a10_traffic"].round(2))
t["a10_placement"].round(3)

# %% [markdown]
# **The planner's answers**, on article A's 910B and on the A100 (the `device` column; global
# batch one sequence per card, at least 64, except the 8-card case at its command's 32 and the
# A10 case at 512 sequences, 4 per card: the course's reading, since the article states no batch
# for A10): the article's 13B on 8 cards, its A10 case (13B on 128 cards: the planner's pick
# against TP 8 × DP 16), and a 70B on 1024 cards — each best layout with the step model's
# terms. `tp8_pp1_over_best` is the best TP 8 · PP 1 layout's step over the best step: on the
# 8-card case it is article A §6.1's "on one 8-card machine TP 8, PP 1 is usually best"
# (单机 8 卡时，TP=8、PP=1 通常最优), at its command's 13B and global batch of 32, shown as context,
# not voted ("usually" is about 8-card machines in general, this is one case): the sentence below
# the table sets the ratio within Megatron-Core's layouts (the article's framework:
# `tp8_pp1_over_best_megatron`) against the margin for two layouts (`step_error.LAYOUT_MARGIN`),
# and the ratio to the best of any framework against the margin for a switch
# (`step_error.SWITCH_MARGIN`), since that best changes the framework too. A modelled MFU near 0.7 sits at the top of the published bf16 runs chapter 09 validates on,
# whose error band it gives. The unmeasured assumptions a ranking depends on (the GEMMs' share of the device's
# MAMF, DP overlap, memory margin, the network's per-step latency and link efficiency: fields
# of `rates.Assumptions`) are then varied one at a time for the 70B case on the A100.

# %%
display(Markdown(step_model_error_line()))  # the error band every planner step carries
answers = t["planner_answers"]
display(answers.round(3))
eight = answers[answers.devices == 8].dropna(subset=["tp8_pp1_over_best_megatron"])
if len(eight):
    display(Markdown(eight_cards.eight_card_text(eight)))
# each assumption's value in its own units (a latency in µs would read 0 at three decimals)
t["planner_sensitivity"].assign(value=t["planner_sensitivity"].value.map("{:.3g}".format)).round(3)

# %% [markdown]
# ## 4 · Mixture of experts: all-to-all and the most loaded expert (B10)
#
# An expert layer sends each token to its experts and back: two all-to-alls per forward.
# Below, the all-to-all against an all-reduce of the same buffer on the same ranks (a ring
# all-to-all moves (n − 1)/n of the buffer per rank, an all-reduce 2(n − 1)/n), then an expert
# layer whose experts work (a sleep per token received) on skewed routing: rank 0's experts get
# 1.5× the mean; the others finish early and wait in the combine. The all-to-all results are
# checked (`wrong`: elements that differ from the expected exchange, summed over ranks).

# %%
display(t["exchange"])
t["skew"]

# %% [markdown]
# **The cost sentence at published MoE layouts.** This host has no link between machines, so the
# all-to-all's cost against a cross-node all-reduce is priced by the course's one step model at
# two published training layouts (DeepSeek-V3 on 2048 H800s: PP 16, EP 64 over 8 nodes, ZeRO-1 DP
# 128; Qwen3-30B-A3B on 16 H100s over two nodes: EP 16), nothing overlapped: the expert-parallel
# all-to-alls per step against the data-parallel gradient reduction per step
# (`b10_scale.b10_scale_table`). DeepSeek-V3's report states the all-to-all's weight itself
# (computation to communication about 1:1 under cross-node EP), which checks the model's
# all-to-all term on a figure it was not shaped on. Those seconds do not decide: chapter 09 shows
# the model's split of an MoE step into all-to-all and reduction is not validated (it ranks
# Qwen3-235B's published layouts in reverse). Bytes need no such split
# (`b10_scale.b10_byte_table`): per device and step, the all-to-alls' bytes that cross nodes
# (4 per MoE layer and micro-batch: routed rows × h × 2 B, the share of the EP group outside the
# node) against every byte of the DP reductions (the device's gradients × 2(dp − 1)/dp, all
# counted as crossing nodes). The row is decided on them beyond an order of magnitude
# (`stated.B10_BYTES_DECISIVE`: it covers DeepSeek's node-limited routing, which at most halves
# the routed bytes, and an all-to-all's byte costs no less than a ring all-reduce's).

# %%
display(t["b10_scale"])
t["b10_bytes"]

# %% [markdown]
# ## 5 · Optimizer offload (A15)
#
# Article A's section makes three statements: the host link's bandwidth is "not in the same order
# of magnitude" as the card-to-card link's; overdoing offload turns training I/O-bound; use it
# only when memory is just short. The first is a datasheet ratio (`offload.link_ratios`: the
# 910B's HCCS against PCIe 4.0 and 5.0 x16, two GPU generations beside it), per card and, where
# a published topology puts several cards behind one PCIe switch uplink (two A100s per switch in
# a DGX A100), with that uplink shared; "不在一个量级" reads literally as 10× and idiomatically as
# "far slower", and where the two readings disagree the row is not checkable. The second is priced
# at the article's own configuration (`offload.offload_table`): its 13B on 8 910B cards, TP 8,
# DP 1, so each card holds an eighth of the weights and all of their optimizer states, with the
# step from the course's step model at its launch command. The article's own 2.4 s for this run
# would mean an MFU above 1 (chapter 01, A19): it is kept as a column, not used. Two readings of
# "offload the optimizer", each over the host link (PCIe 4.0 x16 assumed, 3.0 and 5.0 as its
# sensitivity; the article does not state it) and, for scale, the card-to-card link:
# **moments only** keeps Adam on the card and moves the two fp32 moments in and out every step
# (the article's words); **ZeRO-Offload** (Ren et al. 2021 §4.1) runs Adam on the host, so each
# card sends its fp16 gradient shard down and receives its fp16 parameter shard back, and the
# host's Adam takes time of its own (memory-bound: 26 bytes per parameter at a host bandwidth
# per card we assume, `stated.A15_*`, and at 100%, 50% and 20% of it: a fused, vectorised CPU
# Adam streams near the DRAM's peak, an unfused one far below it). At DP 1 nothing is sharded, so ZeRO-Offload is the most
# an optimizer offload can move. Article B's 7B, with its states sharded over 8 data-parallel
# cards, is context. Times are for one direction of a full-duplex link at its datasheet rate
# (analytic on a CPU, which has no host–device link; on a GPU the run also measures pinned host ↔
# device and device → device copies, `copy_bandwidths`). The offload is serial to the step (the
# moments come back before the update; ZeRO-Offload's host step is on the critical path), so its
# share is of the step that contains it, offload ÷ (step + offload): I/O-bound at half of that,
# the I/O as long as the rest (the share over the step without the offload, used until
# 2026-12-06, is in docs/changelog.md). The offload's weight depends on the
# step it joins, which shrinks with the global batch, so the row is also read at batches of 16
# and 8 on the same command (`stated.A15_GLOBAL_BATCHES`). §5.2's sentence states no
# configuration, and the §6.1 command it is priced at neither offloads nor shards (DP 1), so
# the command is borrowed, not the sentence's own: every batch is an assumed scenario and votes.

# %%
if records.get("copy_bandwidths"):
    print({k: f"{v / 1e9:.1f} GB/s" for k, v in records["copy_bandwidths"].items() if k.endswith("per_s")})
display(t["a15_link_ratios"].round(2))
t["a15_offload"].round(3)

# %% [markdown]
# ## Claims
#
# A10, A12's overlap row and A13's layer-count rule are analyses on article A's 910B with the
# A100 beside it (this machine is neither): each is *confirmed* or *refuted (analysis)* only when every case
# it covers gives the same answer (`verdicts.over_scenarios`), *analytic only* otherwise. A15's
# I/O-bound row is answered at each global batch unless an assumed input (the host link, the
# other reading, the host Adam's bandwidth) reverses it (`verdicts.at_stated_case`), and the
# batches vote as A10's cases do; its order-of-magnitude row is a datasheet ratio under two
# readings on the article's 910B, and its advice is the author's experience (not checkable). A12's speed rule
# (ZeRO-2 the better value for ten-billion-class models below 1000 cards) is judged once, in
# chapter 04, at the article's 13B on its 910B cards. A11's collective is counted here against Korthikanti et al.'s
# published design (all-gather + reduce-scatter, the bytes of the all-reduce they replace); A11's
# memory, A12 (memory and traffic), A13 (bubble and interleaving) and B10 (the wait) are measured
# here; B10's cost comparison needs a network between machines (inconclusive on this machine
# for the toy's per-buffer ratio), and is decided at published MoE layouts by the step model:
# confirmed or refuted (analysis) when every layout's all-to-all per step lies beyond the course's
# switch margin above or below its DP reduction per step, analytic only otherwise.

# %%
claim_list = o.claims
verdicts.publish_claims(out, o.claims, o.metrics)  # tables/claims.csv: the full table
display(Markdown(verdicts.claims_markdown(o.claims)))

display(Markdown(stability_note(out)))

# %% [markdown]
# ## What this study showed

# %%
sh_gate, tp_gate = t["sharding"], t["tensor"]
assert analysis.gradient_ok(sh_gate.gradient_gate, sh_gate.gradient_scale).all(), (
    "FSDP2 changed the gradients"
)
assert analysis.gradient_ok(tp_gate.max_abs_diff, tp_gate.gradient_scale).all(), "TP / SP changed the block"
display(Markdown(analysis.takeaways(t)))
display(Markdown(summary_line(claim_list)))
