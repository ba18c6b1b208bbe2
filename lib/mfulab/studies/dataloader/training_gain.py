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
"""

from __future__ import annotations

from mfulab.analytic.articles import b15_gain
from mfulab.studies.dataloader.stated import B2_STATED, B11_STATED, BYTES_PER_TOKEN, CASE_STUDY_JOB
from mfulab.studies.dataloader.throughput import SHARDS, SMALL_FILES, stall_runs, step_split
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
    """The sentence tested is the case study's (it shows the gain), not the general "can give
    5% or more", which one case cannot refute: refuted by its own arithmetic when its four
    changes together gain less than the 5% it promises from the format alone."""
    c = case_study_gain()
    gain = B11_STATED["min_throughput_gain"]
    return Claim(
        "B11",
        "its own case study shows the ≥5% training throughput that tar shards give (step 4 of §5.2)",
        f"its §5.2 step 4: {c['step_before_s']} → {c['step_after_s']} s per step (7B on 64 A100s) after "
        "tar shards, 12 workers, persistent workers and pin_memory together",
        "confirmed" if c["throughput_gain"] >= gain else "refuted",
        f"{c['step_before_s']} / {c['step_after_s']} s = {c['throughput_gain']:.3f}× steps/s for the four "
        f"changes together; threshold {gain:.2f}× for the format alone. It also says the data wait "
        f"'basically disappeared': had the {c['stated_wait_s']} s of its §5.1 gone, the step would have "
        f"gained {c['gain_if_wait_removed']:.2f}×, not {c['throughput_gain']:.3f}×",
        basis=verdicts.ARITHMETIC,
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


def b11_training(records) -> Claim | None:
    """This machine's training loop, a toy regime (a CPU step, warm page cache): *not shown*
    when even removing the small files' whole wait could not gain the 5% (nothing here could
    show the effect), inconclusive otherwise (the loop is not timed interleaved)."""
    runs = {r["format"]: r for r in stall_runs(records, "real compute")}
    if SMALL_FILES not in runs or SHARDS not in runs:
        return None
    small, tar = training_ceiling(runs[SMALL_FILES]), training_ceiling(runs[SHARDS])
    gain = B11_STATED["min_throughput_gain"]
    decision = "refuted" if small["gain_ceiling"] < gain else "inconclusive on this machine"
    return Claim(
        "B11",
        "tar shards instead of many small files give ≥5% training throughput — this machine's training loop",
        f"the stall runs with real compute (one process, num_workers={small['num_workers']}, "
        "page cache warm): the JSON files loader's data wait, the most any loader could remove",
        decision,
        f"JSON files wait {small['data_wait_share']:.1%} of the run's time: at most "
        f"{small['gain_ceiling']:.3f}× steps/s were it all removed; threshold {gain:.2f}×; tar waits "
        f"{tar['data_wait_share']:.1%} (the runs are not interleaved: their step times are not compared)",
        basis=verdicts.TOY,
    )


def required_tokens_per_s_per_rank() -> float:
    """The case study's job after its loader change: tokens each data-parallel rank's loader
    must deliver per second (the TP group shares one batch), global batch × sequence length /
    step / (GPUs / TP)."""
    job = CASE_STUDY_JOB
    step_s = b15_gain("webdataset")[1]
    tokens_per_step = job["global_batch"] * job["seq_len"]
    data_parallel_ranks = job["gpus"] // job["tp"]
    return tokens_per_step / step_s / data_parallel_ranks


def required_vs_available(records, cold_table, bytes_per_token: float = BYTES_PER_TOKEN):
    """Per format (its cold rounds, ``num_workers=0``): bytes of text per second one loader
    process reads here, the case study's per data-parallel rank (its tokens/s × the assumed
    bytes per token), and the headroom (read / required) for one process and for the case
    study's 12 workers (if each had a core)."""
    import pandas as pd

    required_tokens = required_tokens_per_s_per_rank()
    required_bytes = required_tokens * bytes_per_token
    bytes_per_sample = records["corpus"]["bytes_of_text"] / records["corpus"]["count"]
    workers = B11_STATED["workers_per_gpu"]
    rows = [
        {
            "format": r.format,
            "read_text_bytes_per_s": r.samples_per_s * bytes_per_sample,
            "required_tokens_per_s_per_rank": required_tokens,
            "required_text_bytes_per_s_per_rank": required_bytes,
            "headroom_one_process": r.samples_per_s * bytes_per_sample / required_bytes,
            f"headroom_{workers}_workers": workers * r.samples_per_s * bytes_per_sample / required_bytes,
        }
        for r in cold_table.itertuples()
    ]
    return pd.DataFrame(rows)
