"""Article B §1's rows about reading a job's losses and its own definition of MFU: the quick
diagnosis with nvidia-smi dmon, "usually one or two main bottlenecks", and MFU as "the share of
time the GPU spends computing the model"."""

from __future__ import annotations

from mfulab.analytic.b15 import b15_table
from mfulab.studies.mfu.stated import (
    B2_CASE_STUDY_LOSSES,
    B2_DMON_PUBLISHED,
    B2_DMON_SEES,
    B2_DMON_SOURCE,
    B_LOCAL_MFU_EXAMPLE,
)
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim


def b15_gross_gain_s() -> float:
    """The case study's gross gain: the sum of the steps that made it faster (seconds)."""
    return float(b15_table().gain_s.clip(lower=0).sum())


def _b15_communication_s() -> float:
    """Seconds the case study's communication steps saved (overlap and bandwidth categories)."""
    df = b15_table()
    return float(df[df.category.fillna("").str.startswith("communication")].gain_s.clip(lower=0).sum())


def b2_dmon_claim() -> Claim:
    """Article B §1.2's quick diagnosis: nvidia-smi dmon's GPU and memory utilisation (with the
    step times) tell which of the four losses dominates. NVML defines the GPU figure as the share
    of time some kernel is resident and the memory figure as the share in which device memory is
    read or written (``stated.B2_DMON_SEES``); what each loss then reads on them is the course's
    analysis of those definitions at the article's configuration (A100s, NCCL, whose collectives
    are kernels resident while they wait), and published reports of hung ranks reading 100%
    (``stated.B2_DMON_PUBLISHED``) only illustrate it. Judged on the two columns the article names:
    refuted (analysis) when a loss its own case study works on (``stated.B2_CASE_STUDY_LOSSES``)
    reads like compute on both, confirmed (analysis) when every loss shows on at least one."""
    blind = [k for k, v in B2_DMON_SEES.items() if v["kernel_resident"] and not v["memory_tells_apart"]]
    leading_blind = [k for k in blind if k in B2_CASE_STUDY_LOSSES]
    if leading_blind:
        decision = "refuted"
    elif not blind:
        decision = "confirmed"
    else:
        decision = "not checkable"
    return Claim(
        "B2",
        "nvidia-smi dmon's GPU and memory utilisation, with the step times, quickly show the dominant loss",
        f"what each column counts ({B2_DMON_SOURCE}) against each of the four losses, and published "
        "readings of ranks waiting in NCCL; refuted when a loss the article's own case study works on "
        "(§5.2: communication and data IO) shows on neither column",
        decision,
        "per loss, GPU utilisation / memory utilisation: "
        + "; ".join(f"{k}: {v['why']} / {v['memory_column']}" for k, v in B2_DMON_SEES.items())
        + f". Invisible on both: {' and '.join(blind) or 'none'}"
        + (
            ", which the article's own case study works on: its ladder's communication steps (buckets, "
            f"NCCL tuning) save {_b15_communication_s():.1f} s of its {b15_gross_gain_s():.1f} s gross gain"
            if leading_blind
            else ""
        )
        + ". Illustrated by published readings of ranks blocked in NCCL (hung jobs, not a step's exposed "
        "communication): "
        + "; ".join(B2_DMON_PUBLISHED)
        + ". The step times beside them give each step's total "
        "only, which cannot split communication from compute. dmon's power column (on by default) does "
        "hint at such a wait, full utilisation at low power, but the article names the two utilisation "
        "columns; the per-SM activity counters (DCGM's profiling metrics, e.g. SM activity and tensor-pipe "
        "activity) or a profiler's trace tell the losses apart",
        # decided by NVML's documented definitions of the two columns and NCCL's documented
        # collectives running as kernels: no model and no configuration enters (round twenty-seven's
        # and twenty-eight's readers of chapter 01; before, analysis at assumed configurations)
        basis=verdicts.DOCUMENTED,
    )


def b2_few_bottlenecks_claim(split) -> Claim:
    """Article B §1.2: "多数情况下，你只会遇到一到两个主要瓶颈" (in most cases you meet only one or
    two main bottlenecks). A claim about most jobs, with no data: not checkable; the article's own
    case study (three problems in §5.1's trace; the §5.2 ladder's categories that each saved at
    least 0.3 s) and this run's split (``time_split.b2_split``) beside it."""
    losses = split[split.category != verdicts.B2_USEFUL].sort_values("share_of_wall", ascending=False)
    ladder = b15_table()  # its two communication categories are one of B2's four losses
    by_loss = ladder.groupby(ladder.category.str.replace(r"^communication.*", "communication", regex=True))
    loss_gains = by_loss.gain_s.sum().sort_values(ascending=False)
    n_large = int((loss_gains >= 0.3 - 1e-9).sum())
    top_two = ", ".join(f"{k} {v:.1f} s" for k, v in loss_gains.iloc[:2].items())
    top_two += f" of {loss_gains.clip(lower=0).sum():.1f} s"
    top = losses.iloc[0]
    rest = losses.iloc[1:].share_of_wall.sum()
    return Claim(
        "B2",
        "in most cases a job meets only one or two main bottlenecks (多数情况下，你只会遇到一到两个主要瓶颈)",
        "the article's words: a frequency over jobs, with no data behind it; this run's losses beside it",
        "not checkable",
        "the article's own case reads either way, and is one case, not data: §5.1 reads 三个问题 (three "
        f"problems) from its trace, and its §5.2 ladder saves ≥ 0.3 s in each of {n_large} of B2's four "
        f"losses, or two main ones ({top_two}) and a minor third; "
        "this run "
        f"(one process, no communication) loses most to {top.category}, {top.share_of_wall:.1%} of the "
        f"wall clock, the other three together {rest:.1%}",
        basis=verdicts.STATEMENT,
    )


def mfu_definition_claim(b: dict) -> Claim:
    """Article B's introduction defines MFU as "the share of time the GPU really spends computing
    the model" (真正用于"算模型"的时间占比), and two paragraphs on (§1.1) gives its own formula:
    model FLOPs over the peak times the step. Read by that formula the gloss is the time the model's
    FLOPs would take at the peak over the time taken, PaLM's rate rearranged (Chowdhery et al. 2022,
    App. B): shown (by construction). The occupancy reading (the share of the wall clock a kernel is
    busy) is false, and this run (``time_split.breakdown``) shows how far apart the two are."""
    compute_share = b["compute_s"] / b["job_wall_s"]
    mfu = b["global_mfu_vs_ceiling"]
    return Claim(
        "B1",
        'MFU measures the share of time the GPU spends computing the model (真正用于"算模型"的时间占比)',
        "the gloss read by the article's own formula two paragraphs on (§1.1: model FLOPs ÷ (peak × step "
        "time)), PaLM's definition (Chowdhery et al. 2022, Appendix B); the occupancy reading beside it, "
        "with this run as the example",
        "shown",
        "by the article's formula the gloss is an identity: the time the model's FLOPs would take at the "
        "peak over the time taken, PaLM's rate rearranged. Read instead as the share of the wall clock "
        f"spent computing (occupancy) it is false: this run computes {compute_share:.1%} of its wall clock "
        f"and reaches {mfu:.1%} of the measured matmul ceiling over it ({b['convention']} FLOPs), since a "
        "slow kernel occupies time as fully as a fast one",
        basis=verdicts.CONSTRUCTION,
    )


def waits_gap_claim(waits) -> Claim:
    """Article B §1.1: "the vast difference between these two numbers [44% and 80%] is exactly
    where communication, IO and scheduling waste sit". The article defines local MFU one paragraph
    earlier (its denominator keeps only the compute stream's busy time, every wait filtered out), so
    global ÷ local is the busy share of the wall clock and the gap is the waits by construction:
    shown where the waits demo (``run_checks.waits_table``, a sleeping loader) opens it, inconclusive
    on this machine where it does not. Beside it: the occupancy reading of the sentence's 占用率
    (the gap would also hold slow kernels), and what the article's own figures imply the waits are."""
    quiet, slow, ex = waits.iloc[0], waits.iloc[-1], B_LOCAL_MFU_EXAMPLE
    opened = (
        slow.global_over_local < quiet.global_over_local
        and slow.data_share_of_wall > quiet.data_share_of_wall
    )
    waits_share = 1 - ex["global"] / ex["local"]
    return Claim(
        "B1",
        "the gap between the two numbers (44% global, 80% local) is where communication, IO and scheduling "
        "waits sit (这两个数字的天壤之别，恰恰就是通信、IO和调度浪费所在的地方, §1.1)",
        "local MFU as the article defines it one paragraph earlier (waits out of the denominator), shown "
        "with this run's steps again, without and with a loader that sleeps before each batch",
        "shown" if opened else "inconclusive on this machine",
        f"a {slow.loader_sleep_ms:.0f} ms sleep per batch takes {slow.data_share_of_wall:.0%} of the wall "
        f"clock: global MFU {quiet.global_mfu:.1%} → {slow.global_mfu:.1%}, local {quiet.local_mfu:.1%} → "
        f"{slow.local_mfu:.1%}, the gap is the waits. Remarks: read as occupancy (占用率, the stream "
        f"{ex['local']:.0%} busy) the gap would also hold slow kernels; and by the identity the article's "
        f"{ex['global']:.0%} against {ex['local']:.0%} means waits of {waits_share:.0%} of the wall clock, "
        f"about {waits_share * 10:.1f} s of a 10 s step, where §5.1 names a 1.5 s data wait and an "
        "all-reduce tail",
        basis=verdicts.CONSTRUCTION,
    )
