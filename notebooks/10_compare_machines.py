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
# # 10 · Comparing machines
#
# Every study writes its headline numbers to `results/<machine>/<study>/metrics.json`. This
# notebook puts the machines side by side — the laptop next to the GPU next to the cluster —
# with the metrics each study declares in its `study.yaml` (key, unit, label, format; see
# `docs/architecture.md`). A machine that lacks a study shows *missing*, never disappears; a
# number that does not exist on a machine (a CPU has no datasheet peak) shows *n/a*.
#
# **One number per property of a machine.** The matmul ceiling, the memory bandwidth and the
# all-reduce α–β come from the machine's calibration, which every study reads: a key that
# several studies write is one row (its `study` column names them all), and it would show
# twice, marked, only if two studies disagreed. A study's own measurement of the same
# property is labelled *check* (the overlap run's busbw beside the calibration's B).
#
# **Reading the values.** Shares are percentages, ratios carry their ×, and an MFU names the
# FLOPs convention its numerator counted (notebook 01). Where a study's stability run
# (`stability.json`: `make stability`, N fresh processes) saw a number move between fresh runs by
# more than the run-to-run drift the comparisons assume (5%), the value says by how much. The
# calibration's own figures (matmul ceiling, copy bandwidth, α and B) take the calibration's
# stability run, since every run of a study reads the one committed calibration.
#
# **Telling machines apart** (`drift.across_cell`): what decides depends on what the number is.
# - *A number no fresh run moved* (a formula such as the ISA peak, a count, an exact slope): the
#   machines differ exactly where the values are not equal; there is no drift to test.
# - *An effect with an interval over its rounds* (the ladder's speed-up, with its `_lo`/`_hi`):
#   the machines differ only where the intervals do not overlap, the course's rule for a ratio.
# - *A share or a signed error*: the difference in percentage points, against the drift taken on
#   the larger value and at least one point (the course's presence floor, chapter 07's B2: two
#   shares under 1% of a step are not told apart).
# - *Anything else* (rates, times, ratios): the spread (max − min over the median, as the stability
#   report measures drift) against the widest drift any machine's stability run saw, or the drift
#   its study declares (`Metric.drift_param`: chapter 06's cold tar / JSON ratio, chapter 05's
#   per-tensor ratio), at least 5%.
#
# A machine without a stability run borrows the others' drift: its own is unknown. Where the
# machines are one host on different core budgets, `÷ cores` gives a rate's ratio over the ratio
# of the cores (1: linear), and the note under the table names what deviates. Rows computed from
# published data alone (chapter 09's validation) depend on no machine: they are shown once, in the
# block after the table.

# %% tags=["parameters"]
params = {}  # the profile's values (papermill injects them); empty: the defaults
out_dir = ""  # set by the runner; empty: scratch/compare
from_dir = ""  # unused: the comparison reads results_root

# %%
import pandas as pd
from IPython.display import HTML, Markdown, display

from mfulab import results
from mfulab.measure.timing import RUN_TO_RUN_DRIFT
from mfulab.studies.compare import (
    across,
    analysis,
    balance,
    drift,
    hosts,
    mfu_gap,
    published,
    published_data,
    scaling,
    summary,
)
from mfulab.studykit import plots
from mfulab.studykit.notebook import setup

out, p, records = setup("compare", params, out_dir=out_dir, from_dir=from_dir)
display(Markdown(analysis.scope_note(records)))
# the tables the chapter shows, built once; the summary reads them
table = analysis.comparison_table(records)
refs = published.reference_table(
    records["published"],
    analysis.measured_ceilings(table),
    analysis.measured_gloo(table),
    crowded=hosts.oversubscribed(records, "overlap"),  # chapter 02's gloo run
)
balance_table = balance.machine_balance(
    records["published"], analysis.measured_ceilings(table), analysis.measured_copy(table)
)
verdict_matrix = analysis.verdict_table(records)
display(Markdown(summary.summary(refs, balance_table, verdict_matrix, records)))

# %%
measured_rows, published_rows = published_data.split(table)
results.save_table(out, "comparison", measured_rows)
results.save_table(out, "published_data", published_data.published_block(published_rows))
results.save_metrics(out, {"machines": records["machines"], "metrics": table.to_dict(orient="records")})
shown = analysis.formatted(measured_rows, records)
with pd.option_context("display.max_colwidth", None, "display.max_rows", None):
    display(shown)
display(Markdown(scaling.deviations_note(measured_rows, shown, records["machines"], RUN_TO_RUN_DRIFT)))
display(Markdown(drift.plain_drift_note(shown, RUN_TO_RUN_DRIFT) if len(records["machines"]) > 1 else ""))
display(Markdown(mfu_gap.mfu_gap_note(table, records)))
if analysis.disagreements(table):
    display(Markdown("**Two studies disagree on:** " + "; ".join(analysis.disagreements(table))))

# %% [markdown]
# **Computed from published data alone** (chapter 09: the step model against published runs).
# These rows use no measurement of any machine, so every machine's render gives the same value;
# `same on every machine` checks it.

# %%
display(
    published_data.published_block(published_rows)
    .drop(columns="key")
    .style.format({"value": lambda v: f"{v:.4g}" if isinstance(v, int | float) else str(v)}, na_rep="—")
    .hide(axis="index")
)
display(
    Markdown(published_data.null_model_text(published_data.bootstrap(p.results_root, records["machines"])))
)
display(Markdown(published_data.excluded_holdout_text(published_data.published_block(published_rows))))

# %%
if len(records["machines"]) > 1:  # one machine: its ceiling and peak are rows of the table above
    fig = analysis.plot_ceilings(table, records)
    plots.save_figure(fig, out, "ceilings")

# %% [markdown]
# ## This machine against published measurements
#
# What the section shows is what other machines reach, as others measured and published it
# (`studies/compare/published_references.yaml` for the matmul rows; `analytic/nccl_published.py`,
# the list chapter 02 reads, for the all-reduces), and where each machine measured here sits: a
# GPU's bars are comparable with them; a CPU's are drawn hatched, marked not comparable with the
# reason (the first GPU run, `docs/first-gpu-run.md`, adds the first comparable bar).
#
# The quantity that means the same on any machine is a **share of the peak**: the best matmul over
# the dense peak (a GPU's Maximum Achievable Matmul FLOPS over its datasheet bf16 peak, devices.yaml's
# figure, one per device across the course; this machine's calibrated fp32 ceiling over its ISA
# peak, chapter 01), and an all-reduce's bus bandwidth over the link that carries it (a GPU's NVLink
# per direction within a node; a node's NICs together across nodes). A CPU's matmul share is
# not comparable: its ISA peak takes the clock the kernel reports (a VM's nominal figure), which
# the cores' boost passes, so the share can pass 100%, and its ceiling is fp32 on square shapes,
# not a shape search. This machine's all-reduce (chapter 02's gloo run, 2 ranks on one host) is
# set over its memory copy bandwidth: gloo has no shared-memory transport, and on one host it runs
# over TCP on the loopback interface, copying every byte through the kernel, so the copy bandwidth
# bounds it from above; it is not a link either.
# **One NVLS rule** (as chapter 02 reads it): NVLink SHARP reduces inside the switch, so fewer bytes
# cross each link than busbw's ring formula counts; its rows are an algorithm's gain over the ring,
# with no share, and are left off the bars. Every all-reduce row names the largest message of its
# sweep, its NCCL version and year where the source states them; a row marked *expected* is a
# maintainer's statement of what a healthy system reaches, not a run.

# %%
results.save_table(out, "published_references", refs)
with pd.option_context("display.max_colwidth", 60, "display.max_rows", None):
    display(
        refs.drop(columns="source").style.format(
            {"value": "{:,.4g}", "peak": "{:,.4g}", "share_of_peak": "{:.0%}"}, na_rep="—"
        )
    )
display(
    Markdown(
        "**Sources.** "
        + " ".join(f"*{q}*: {src}." for q, src in records["published"]["sources"].items())
        + " Rows that name their own source (the nccl-tests threads chapter 02 cites) give it in "
        "`tables/published_references.csv`."
    )
)
fig = published.plot_shares(refs)
plots.save_figure(fig, out, "shares_of_peak")
display(Markdown(published.takeaway(refs) + "."))
display(Markdown(published.article_note(refs)))
results.save_table(out, "machine_balance", balance_table)
display(
    balance_table.style.format(
        {"memory_TB_per_s": "{:.3g}", "peak_flop_per_byte": "{:.0f}", "best_matmul_flop_per_byte": "{:.0f}"},
        na_rep="—",
    ).hide(axis="index")
)
display(Markdown(balance.balance_note(balance_table)))

# %% [markdown]
# **What published training runs reach.** Chapter 09 collects published runs (papers and
# framework benchmarks, each with its stated step time) and prices those its step model covers;
# the runs it refuses (MoE, FP8 and layouts it does not cover, among them some of the highest
# MFUs published) are kept here as their own framework group, "not priced", so the pooled ranges
# are not selected by the model's coverage. Their MFU, counted the same way for all
# (PaLM's model FLOPs per step over the stated step), by device, framework and the precision
# the GEMMs ran in: the range a tuned job on those machines lands in, beside which this
# machine's MFU (chapter 01 against its own ceiling; chapter 07 for a 2-rank job) can be read.
# Two denominators: the cluster's dense bf16 peak (`*_mfu`, what most reports quote), and the
# dense peak of the GEMMs' own precision (`*_mfu_own_peak`). An FP8 run's GEMMs can run at twice
# bf16's peak, so its bf16-peak MFU can pass the best bf16 matmul's share of the peak (the
# table of published MAMF above): only its own-peak figure can be set beside that ceiling.
# A third, `median_mfu_over_mamf`, divides by the device's best measured GEMM in the run's own
# precision (MAMF, devices.yaml's `mamf_tflops`: bf16 for a bf16 run, FP8's own figure for an FP8
# run, H100 SXM 1402.6 and H200 1453.4 TFLOP/s from the same MAMF table, `mamf_source`; empty
# where devices.yaml has none, as for the A800) instead of its datasheet peak: the denominator
# this machine's own MFU uses (its measured matmul ceiling, chapter 01). `gpus` gives the range of
# cluster sizes in a row and `sources` how many publications it pools: a row mixes models and
# scales, so a difference between two frameworks' rows is not the frameworks' alone; every run
# behind a row, with its source, GPU count, step time and MFU, is in `tables/published_mfu_rows.csv`.
# **Not a yardstick for this machine**: a 2-core CPU running one fp32 process of a few million
# parameters, with no collective on its critical path, reaches a high share of its own ceiling
# (chapter 01) for reasons a cluster does not share; its MFU beside these rows says how a toy step
# uses one chip, not how efficient training at scale is. Published, not measured here.

# %%
published_mfu = published.published_mfu_table(records.get("published_runs") or [])
results.save_table(out, "published_mfu", published_mfu)
# every run behind each pooled row, one row each: tables/published_mfu_rows.csv
results.save_table(
    out, "published_mfu_rows", published.published_mfu_rows(records.get("published_runs") or [])
)
shares = [
    "median_mfu",
    "min_mfu",
    "max_mfu",
    "median_mfu_own_peak",
    "max_mfu_own_peak",
    "median_mfu_over_mamf",
]
published_mfu.style.format(dict.fromkeys(shares, "{:.0%}"), na_rep="—").hide(axis="index")

# %% [markdown]
# ## Verdicts side by side
#
# Every claims row of every chapter, one column per machine: its verdict there, with the basis
# it names (a verdict *measured here* on a laptop and one on a GPU test the same claim in two
# regimes; an *analysis* verdict is the same wherever it is rendered). A row is one claim,
# joined across machines on its id and its words (not its position in a study's table: a row
# that newer code added would shift every row after it), and where the machines' bases differ
# the `basis` cell names each. `differs` marks a row whose verdict is not the same on every
# machine that has it, and reads *n/a (other code)* where the machines ran the study at
# different code (column `other code`): not compared, which is not the same. `flipped on` names the machines
# whose `make stability` run saw the row change between fresh runs of the same machine: there
# a difference between machines is no evidence of anything; `no stability run on` names the
# machines whose results of that study come from one run, where whether a row flips is unknown.
# `not comparable on` names the machines whose run of the study launched more ranks than it had
# usable cores (the ranks took turns on them): their rows that rest on a measurement are left
# out of `differs`, since they measure an oversubscribed job. `rests on the machine` marks the
# rows whose basis is a measurement taken on the machine (the claim's regime or a toy regime):
# only those could read differently on a GPU or a cluster; the others (analysis, the article's
# arithmetic, documentation, publications) read the same wherever the course is rendered.
# `evidence` is the start of what the row rests on, from the first machine that has it (each
# study's `tables/claims.csv` has the whole text).
#
# **A zero is conditional.** Some settings of the cpu profile were chosen after a stability run
# on the 2-core box saw a verdict flip: the widening of chapter 03's DRAM ratio
# (`ln_dram_ratio_drift`) and its interleaved rounds, chapter 05's per-tensor ratio
# (`per_tensor_ratio_drift`), chapter 06's cold tar / JSON ratio (`format_ratio_drift`),
# chapter 07's straggler size on this profile (`straggler_slowdown`) and its rank pinning. Each is
# a named parameter whose value per profile is in the study's `params.py` and `<profile>.yaml`,
# with the spread it was set from and its date, and the change is in `docs/changelog.md`.
# "0 flipped" says the verdicts are stable under those settings on these machines, over 3 fresh
# runs each (a rare flip can pass three runs unseen); an untried machine may need its own.

# %%
results.save_table(out, "verdicts", verdict_matrix)
display(Markdown(analysis.verdict_note(verdict_matrix, records["machines"], records)))
with pd.option_context("display.max_colwidth", 70, "display.max_rows", None):
    display(analysis.machine_bound(verdict_matrix))
display(HTML(analysis.other_rows_html(verdict_matrix)))

# %% [markdown]
# ## One claim, several chapters
#
# Some claims are judged in more than one chapter (the note below names them, from the claims
# tables themselves). Their rows are listed side by side, per machine. Rows on different bases answer different questions (a toy regime
# shows a mechanism; the article's own arithmetic checks its numbers) and may differ. Two rows
# on the same basis with different verdicts are marked in `disagrees_with`: the same kind of
# evidence about one claim should tell the same, so each marked pair is either two sentences of
# the claim (read both) or a disagreement between the chapters' models, to be resolved there.
# Where one row on a basis is open (*inconclusive on this machine*, *not checkable*) and another
# decides, `open_beside` names it: one run lacks what the other had (chapter 01's one process
# shows one of B2's losses, chapter 07's job more), which is not a contradiction.

# %%
claims_across = across.across_chapters(records)
results.save_table(out, "claims_across_chapters", claims_across)
display(Markdown(across.across_note(claims_across)))
with pd.option_context("display.max_colwidth", 90, "display.max_rows", None):
    display(claims_across)

# %% [markdown]
# **The flagged rows, with how each chapter judged them.** The configuration and the quantity
# each row rests on (the claims row's *how*): where the two differ (another sentence of the
# claim, another card, a fixed layout against the best one), the pair is two questions, and
# each chapter's row names the other's in its evidence; where they match, the chapters' models
# disagree.

# %%
with pd.option_context("display.max_colwidth", None, "display.max_rows", None):
    flagged = across.flagged_detail(records, claims_across)
    display(flagged if len(flagged) else Markdown("None: no two chapters disagree on one basis."))

# %% [markdown]
# ## What this comparison shows
#
# Per machine: its calibrated ceilings (matmul, memory, the all-reduce's α and B), the MFU
# of the same reference step, and the measured effect of fusion, recompute, bucket size and
# data format, with the highest over the lowest machine's value where two or more machines
# have one (`highest ÷ lowest`). With one machine they would be that machine's numbers, not a
# comparison (the note at the top says which holds). To add a machine, run the studies there (`make all`, or
# `python -m mfulab measure` on a cluster and `make <study> FROM=DIR` anywhere) and re-run
# `make compare`.
