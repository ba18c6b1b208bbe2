"""B11 on the quantity the article states: training throughput (steps per second), not the
loader's samples per second. Two rows:

- the article's own case study (article B §5.2, step 4: 8.7 → 8.4 s per step after tar shards,
  12 workers, persistent workers and pin_memory together), recomputed: its gain in steps/s;
- this machine's training loop (the stall runs with real compute, ``stall``): a loader can
  raise training throughput by at most the data wait it removes,

      gain_ceiling = step / (step − data_wait),

  so where the small-file loader's wait is a sliver of the step, no format can gain 5% there.

:func:`required_vs_available` puts the case study's demand beside this machine's loaders: each
of its 16 data-parallel ranks (64 GPUs / TP 4) takes 512 / 16 = 32 sequences of 4096 tokens
every 8.4 s, ≈ 15,600 tokens/s, ≈ 62 kB/s of text at an assumed 4 bytes per BPE token; against
the bytes of text per second one loader process reads here, cold.

:func:`network_at_case_study` judges B11 behind a network or parallel file system at the case
study's job (the third row): with one sample per file, each rank's loader opens
files_per_step = 32 × 4096 tokens × 4 B / bytes per file files per step, its 12 workers W at a
time; opening them takes files_per_step × latency / W, and the small-file loader slows the step
only where that exceeds the step (8.4 s: tar's, whose few shards cost nothing to open). tar
gains ≥ 5% where it exceeds 1.05 × the step, from the break-even latency
L* = 1.05 · step · W / files_per_step on.
"""

from __future__ import annotations

import numpy as np

from mfulab.analytic.articles import b15_gain
from mfulab.studies.dataloader.hiding import hiding_summary
from mfulab.studies.dataloader.params import (
    FILE_BYTES_GRID,
    PER_FILE_LATENCY_S,
    PUBLISHED_FILE_LATENCIES_S,
    SMALL_FILE_WORKERS,
)
from mfulab.studies.dataloader.stated import B2_STATED, B11_STATED, BYTES_PER_TOKEN, CASE_STUDY_JOB
from mfulab.studies.dataloader.tar_readers import reader_text
from mfulab.studies.dataloader.throughput import (
    SHARDS,
    SMALL_FILES,
    break_even_latency_s,
    format_comparison,
    headroom,
    loader_alone_text,
    stall_runs,
    step_split,
    tokenizing_text,
)
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim


def case_study_gain() -> dict:
    """The case study's step 4 in steps/s, and the 1.5 s data wait of its §5.1 against it."""
    before_s, after_s = b15_gain("webdataset")
    wait_s = B2_STATED["case_study_wait_s"]
    return {
        "step_before_s": before_s,
        "step_after_s": after_s,
        "throughput_gain": before_s / after_s,  # steps/s after over before
        "stated_wait_s": wait_s,
        "gain_if_wait_removed": before_s / (before_s - wait_s),
    }


def b11_case_study() -> Claim:
    """The article's sentence (§4.1: the format change "can give 5% or more" throughput, 可以获得5%
    甚至更高) set against its own case study (§5.2 step 4). The case changed four things at once
    (format, workers, persistence, pinning), so its step times cannot give the format's own share,
    whichever way "can" is read: not checkable on it. Whether the case's own "the wait basically
    disappeared" fits its step times is a row of its own (:func:`b11_wait_gone`)."""
    c = case_study_gain()
    gain = B11_STATED["min_throughput_gain"]
    return Claim(
        "B11",
        "packing small files into tar shards can give ≥5% training throughput (§4.1), set against the "
        "article's own case study (§5.2 step 4)",
        f"its §5.2 step 4: {c['step_before_s']} → {c['step_after_s']} s per step (7B on 64 A100s) after "
        "tar shards, 12 workers, persistent workers and pin_memory together",
        "not checkable",
        f"{c['step_before_s']} / {c['step_after_s']} s = {c['throughput_gain']:.3f}× steps/s for the four "
        f"changes together, against the {gain:.2f}× the sentence gives the format alone: the format's own "
        f"share is not in the article's numbers, only bounded (at most {c['throughput_gain']:.3f}× if the "
        "other three changes slowed nothing, under the 5% in the article's one example, which by the "
        "course's rule for a 'can' does not refute it); its §4.1 speaks of CV and multimodal corpora, "
        "not this 7B text job",
        basis=verdicts.ARITHMETIC,
    )


def b11_wait_gone() -> Claim:
    """§5.2 step 4's "the data wait before each step basically disappeared", against the article's own
    step times: a wait at the start of each step that disappears shortens the step by the part of it
    that was exposed (by more, if steps 1–3 had made compute faster while the loader set the pace,
    which lengthens the wait). How much of §5.1's 1.5 s was exposed the article does not state, so
    the exposed share is the one assumed input: the sentence fits where the exposed part was at most
    the step's fall. Confirmed (analysis) where the fall covers the whole wait, analytic only
    otherwise, with the break-even exposed share: a step that fell less than the wait (or not at
    all) fits a wait that was partly (or wholly) hidden, so the step times alone never refute it."""
    c = case_study_gain()
    fell_s = c["step_before_s"] - c["step_after_s"]
    wait_s = c["stated_wait_s"]
    exposed_break_even = fell_s / wait_s
    verdict = "confirmed (analysis)" if fell_s >= wait_s else "analytic only"
    return Claim(
        "B11",
        "after §5.2 step 4 (tar shards, 12 workers) the data wait before each step basically disappeared",
        f"the step's fall at step 4 against the {wait_s} s wait of §5.1 (the batch reaching the GPU "
        f"{wait_s} s into the step), over the share of that wait that was exposed (unstated)",
        verdict,
        f"{c['step_before_s']} → {c['step_after_s']} s: the step fell {fell_s:.1f} s. A vanished wait takes "
        f"its exposed part off the step: all {wait_s} s exposed would give {c['gain_if_wait_removed']:.2f}× "
        f"steps/s (against the {c['throughput_gain']:.3f}× reported), half of it "
        f"{c['step_before_s'] / (c['step_before_s'] - wait_s / 2):.2f}×. The sentence fits only if at most "
        f"{exposed_break_even:.0%} of the {wait_s} s was exposed (the rest overlapped other start-of-step "
        "work); a loader that set the pace would have made the wait longer, not shorter, as steps 1–3 "
        "sped the compute up. The natural reading, a batch needed before the forward starts and so a wait "
        "wholly exposed, is the one the article's own step times contradict. The article's numbers with "
        "one assumed input, the exposed share: no other configuration enters",
        basis=verdicts.ASSUMED,
    )


def training_ceiling(run) -> dict:
    """One stall run (its first step left out, as in ``step_split``): the data wait's share of
    the run's time, and the training-throughput gain if all of it went."""
    split = step_split(run)
    total_s = sum(split.values())
    wait_s = split["data wait"]
    return {
        "format": run["format"],
        "num_workers": run["num_workers"],
        "data_wait_share": wait_s / total_s,
        "gain_ceiling": total_s / (total_s - wait_s),
    }


def b11_training(records, need=None) -> Claim | None:
    """This machine's training loop, a toy regime (a CPU step, warm page cache): inconclusive on
    this machine either way. Where even removing the small files' whole wait could not gain the 5%,
    nothing here could show the effect (the regime is out of reach, which refutes nothing); the
    loop is not timed interleaved, so no gain is read from it either. The loader alone, cold, is
    the evidence's second reading (``throughput.loader_alone_text``), with the headroom one loader
    process has over a case-study rank's need (``need``: :func:`required_vs_available`): a loader
    with that much headroom moves no step, whatever its own speed-up."""
    runs = {r["format"]: r for r in stall_runs(records, "real compute")}
    if SMALL_FILES not in runs or SHARDS not in runs:
        return None
    small, tar = training_ceiling(runs[SMALL_FILES]), training_ceiling(runs[SHARDS])
    memory = stall_runs(records, "real compute", in_memory=True)
    shared = ""
    if memory:  # the workers share the step's cores: the ceiling holds only where they take none

        def median_step_ms(run) -> float:
            return float(np.median([s["step_s"] for s in run["steps"][1:]])) * 1e3

        shared = (
            f"; an upper bound only where the loader takes no compute from the step: here its workers "
            f"share the step's cores, and the median step is {median_step_ms(memory[0]):.1f} ms with the "
            f"batches in memory against {median_step_ms(runs[SMALL_FILES]):.1f} ms (JSON files) and "
            f"{median_step_ms(runs[SHARDS]):.1f} ms (tar), runs not interleaved"
        )
    emulated = {r["format"]: training_ceiling(r) for r in stall_runs(records, "emulated compute")}
    if SMALL_FILES in emulated and SHARDS in emulated:  # the loader alone on the cores
        json_wait, tar_wait = (emulated[f]["data_wait_share"] for f in (SMALL_FILES, SHARDS))
        shared += (
            f"; beside an emulated step (a timed wait: the loader has the cores), JSON files wait "
            f"{json_wait:.0%} and tar {tar_wait:.0%} of the run"
            + (
                ": on this local disk, with the pages cached, tar is not the faster loader here"
                if tar_wait > json_wait
                else ""
            )
        )
    shared += reader_text(records.get("tar_readers"))
    gain = B11_STATED["min_throughput_gain"]
    decision = "inconclusive on this machine"
    reach = (
        "out of reach here: even all of it gone could not gain the 5%"
        if small["gain_ceiling"] < gain
        else "within reach of the 5%, but the runs are not interleaved"
    )
    return Claim(
        "B11",
        "tar shards instead of many small files give ≥5% training throughput — this machine's training loop",
        f"the stall runs with real compute (one process, num_workers={small['num_workers']}, "
        "page cache warm): the JSON files loader's data wait, the most any loader could remove",
        decision,
        f"JSON files wait {small['data_wait_share']:.1%} of the run's time: at most "
        f"{small['gain_ceiling']:.3f}× steps/s were it all removed{shared}; threshold {gain:.2f}×; tar waits "
        f"{tar['data_wait_share']:.1%} (the runs are not interleaved: their step times are not compared); "
        f"the claim's regime is {reach}" + _step_headroom_text(need) + loader_alone_text(records),
        basis=verdicts.TOY,
    )


def _step_headroom_text(need) -> str:
    """The case study's per-rank demand against one cold loader process here (``headroom``)."""
    h = headroom(need)
    if h is None:
        return ""
    return (
        f". One cold loader process here reads {h['lo']:,.0f}–{h['hi']:,.0f}× the text a case-study rank "
        f"needs ({h['tokens_per_s']:,.0f} tokens/s, tables/required_vs_available.csv){tokenizing_text(h)}: "
        "a loader that far ahead of its step moves no step, so its own speed-up is no training gain"
    )


def network_at_case_study(
    latencies_s=PUBLISHED_FILE_LATENCIES_S,
    file_bytes=FILE_BYTES_GRID,
    bytes_per_token: float = BYTES_PER_TOKEN,
    workers=SMALL_FILE_WORKERS,
):
    """One row per (small-file loader's workers, bytes per file, latency per open) at the case
    study's job (module docstring): files each data-parallel rank opens per step, the seconds
    spent opening them, the step with small files, tar's training-throughput gain, and the
    break-even latency. The article raised its workers to 12 in the same change as tar, so the
    small-file loader's count is unstated: loading inline (0 workers, PyTorch's default) the
    opens add to the step; with W workers prefetching they overlap it, W opens in flight.
    Reading bytes is left out (62 kB/s per rank, ``required_vs_available``)."""
    import pandas as pd

    job = CASE_STUDY_JOB
    step_s = b15_gain("webdataset")[1]  # tar's step: its loader keeps up
    gain = B11_STATED["min_throughput_gain"]
    sequences_per_rank = job["global_batch"] / (job["gpus"] // job["tp"])
    text_bytes_per_step = sequences_per_rank * job["seq_len"] * bytes_per_token
    rows = []
    for n_workers in workers:
        for nbytes in file_bytes:
            files_per_step = text_bytes_per_step / nbytes
            for latency_s in latencies_s:
                open_s = files_per_step * latency_s / max(n_workers, 1)
                if n_workers == 0:  # inline: the step waits for every open
                    small_step_s, break_even_s = step_s + open_s, (gain - 1) * step_s / files_per_step
                else:  # prefetching workers: the opens hide until they outlast the step
                    small_step_s = max(step_s, open_s)
                    break_even_s = gain * step_s * n_workers / files_per_step
                rows.append(
                    {
                        "workers": n_workers,
                        "bytes_per_file": nbytes,
                        "latency_ms": latency_s * 1e3,
                        "files_per_step_per_rank": files_per_step,
                        "open_s_per_step": open_s,
                        "step_small_files_s": small_step_s,
                        "step_tar_s": step_s,
                        "tar_training_gain": small_step_s / step_s,
                        "break_even_latency_ms": break_even_s * 1e3,
                    }
                )
    return pd.DataFrame(rows)


def b11_network(records, table=None, hiding_table=None, image_table=None) -> Claim:
    """B11 behind a network file system, on training throughput, in two jobs: the case study's
    text job (each (workers, bytes per file, published latency) scenario) and the CV job §4.1
    names (``image_job.image_job_table``: published A100 ResNet-50 rates, the decode cost
    measured here, 8-16 workers per GPU, published latencies). "Can give" (可以获得) is a
    possibility: one scenario at the article's own DataLoader (12 workers) whose other inputs are
    published or measured, and for the CV job consistent with the published rate (tar's loader
    keeps up with it), that gains ≥ 5% confirms it (``verdicts.any_scenario``); an inline loader
    and the other worker counts are reported, not voted (they are not the article's). The
    emulation on this disk (the loader alone, a toy regime) is the evidence's second reading;
    ``hiding_table`` (``hiding.hiding_table``) checks the model's worker overlap here."""
    from mfulab.studies.dataloader import image_job

    t = network_at_case_study() if table is None else table
    gain = B11_STATED["min_throughput_gain"]
    decode_s = image_job.median_decode_s(records)
    if image_table is None and decode_s is not None:
        image_table = image_job.image_job_table(decode_s)
    own = B11_STATED["workers_per_gpu"]  # the article's DataLoader: 12 workers (§4.1, §5.2)
    voting = t[t.workers == own]
    images = image_table if image_table is not None else None
    # a CV scenario counts where tar's loader keeps the GPU at the published rate (no wait): the
    # published run had a loader that did, so one that could not is not that run
    consistent = (
        images[(images.workers_per_gpu == own) & (images.wait_tar_s == 0)] if images is not None else None
    )
    decision = verdicts.any_scenario(
        list(voting.tar_training_gain >= gain)
        + (list(consistent.tar_training_gain >= gain) if consistent is not None else [])
    )
    be = t[t.bytes_per_file == t.bytes_per_file.min()].groupby("workers").break_even_latency_ms.first()
    smallest = t.loc[t.bytes_per_file.idxmin()]
    wait_s = B2_STATED["case_study_wait_s"]
    fit_ms = wait_s / smallest.files_per_step_per_rank * 1e3  # inline: the wait is every open's latency
    crossing = t[t.tar_training_gain >= gain]
    # in the scenarios' own frame: the tar step plus the case study's wait, inline, against the tar step
    case_gain = (float(smallest.step_tar_s) + wait_s) / float(smallest.step_tar_s)
    inside = "inside" if t.latency_ms.min() <= fit_ms <= t.latency_ms.max() else "outside"

    def cases(g) -> str:
        return ", ".join(f"{r.bytes_per_file:,} B × {r.latency_ms:g} ms" for r in g.itertuples())

    which = (
        "; tar gains ≥ 5% at "
        + ", ".join(f"{w} workers ({cases(g)})" for w, g in crossing.groupby("workers"))
        if len(crossing)
        else "; tar gains ≥ 5% in no scenario"
    )
    emulated = ""
    if records is not None and all(
        any(r["cache"] == "cold" and r["format"] == f for r in records["sweep"])
        for f in (SMALL_FILES, SHARDS)
    ):
        c = format_comparison(records, PER_FILE_LATENCY_S)
        be_here = break_even_latency_s(records)
        emulated = (
            f". On this disk's loader alone, emulated (a toy regime: one process, "
            f"{PER_FILE_LATENCY_S * 1e3:g} ms per file opened added to measured cold epochs): "
            f"tar / JSON files {c.ratio:.1f}× "
            f"[{c.ratio_lo:.1f}, {c.ratio_hi:.1f}] samples/s, 1.05× from "
            f"{be_here * 1e6:.0f} µs per file on (tables/b11_latency_sensitivity.csv)"
        )
    inline_only = len(crossing) and set(crossing.workers) == {0}
    before_s = b15_gain("webdataset")[0]
    image_text = ""
    if images is not None:
        gains = consistent[consistent.tar_training_gain >= gain]
        image_text = (
            f". The CV job at the article's {own} workers (published A100 ResNet-50 rates, "
            f"{decode_s * 1e3:.1f} ms of decode per image measured here; a rate counts where tar's loader "
            f"keeps up with it, {consistent.precision.nunique()} of {images.precision.nunique()} here): tar "
            f"gains ≥ 5% in {len(gains)} of {len(consistent)} such scenarios"
            + (
                f", at {', '.join(f'{v:g}' for v in sorted(gains.latency_ms.unique()))} ms per file "
                f"({gains.tar_training_gain.min():.2f}–{gains.tar_training_gain.max():.2f}×)"
                if len(gains)
                else ""
            )
            + "; how much rides on this box's decode: "
            + "; ".join(
                f"at {r.latency_ms:g} ms per file and {r.images_per_s_per_gpu:,.0f} img/s tar gains ≥ 5% "
                f"for any decode from {lo * 1e3:.1f} to {hi * 1e3:.1f} ms per image"
                for r in consistent.drop_duplicates(["precision", "latency_ms"]).itertuples()
                if r.latency_ms == consistent.latency_ms.max()
                for lo, hi in [
                    image_job.decode_range_for_gain(r.images_per_s_per_gpu, own, r.latency_ms / 1e3, gain)
                ]
                if lo < hi
            )
            + " (NVIDIA's configs decode with PIL on the CPU, data_backend: pytorch; other worker counts in "
            "tables/image_job.csv)"
        )
    return Claim(
        "B11",
        "tar shards instead of many small files give ≥5% training throughput — network/parallel file "
        "system: the case study's text job and the CV job §4.1 names",
        f"the case study's job (16 data-parallel ranks, 32 sequences each per 8.4 s step): one sample per "
        f"file of {', '.join(f'{b:,}' for b in t.bytes_per_file.unique())} B, opened at the published "
        f"{', '.join(f'{v:g}' for v in t.latency_ms.unique())} ms per file, by a small-file loader of "
        f"{', '.join(str(w) for w in t.workers.unique())} workers (unstated: the article raised them to 12 "
        "with tar; only its 12 vote); inline the opens add to the step, prefetching workers hide them "
        "until they outlast it; and the CV job at 12 workers per GPU (image_job)",
        decision,
        f"break-even latency at {t.bytes_per_file.min():,} B per file: "
        f"{', '.join(f'{v:.2f} ms with {w} workers' for w, v in be.items())}{which} "
        f"({len(crossing)} of {len(t)} scenarios"
        + (
            ": every one an inline loader, PyTorch's default num_workers=0; at the article's own 12 workers "
            "none gains; the case study raised its workers 'to 12' "
            "from a count it does not state"
            if inline_only
            else ""
        )
        + "). The worker "
        f"count, which the article leaves unstated, decides; the case study's {wait_s} s wait fits an "
        f"inline loader at {fit_ms:.1f} ms per {int(smallest.bytes_per_file):,} B file, {inside} the "
        f"published {t.latency_ms.min():g}–{t.latency_ms.max():g} ms, where tar's removing it gives "
        f"{case_gain:.2f}× steps/s (the {float(smallest.step_tar_s):g} s tar step against it plus the wait), "
        f"which the article's own steps contradict: its step before tar was {before_s:g} s, "
        f"{before_s - float(smallest.step_tar_s):.1f} s above tar's, not {wait_s} s "
        f"(tables/b11_network_case_study.csv){image_text}{emulated}"
        f"{'' if hiding_table is None else hiding_summary(hiding_table)}",
        basis=verdicts.ASSUMED,  # §4.1 states no job: workers, file size, latency are readings
    )
