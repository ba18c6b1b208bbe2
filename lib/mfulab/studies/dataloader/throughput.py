"""B11 and B2 (data part) rows of the ``dataloader`` study, from the plain records of ``bench.measure``:
B11 (format on a local disk, worker count; the format behind a per-file latency is analysed at
the case study's job in ``training_gain``, the latency sweep here; persistent workers are in
``settings``) and B2 (data part); B12's two rows are in ``checkpoint``,
and ``claims`` composes them all. Thresholds come from the
claims' own numbers (``stated``); B11's assumption, the per-file latency of a network or
parallel file system, is a parameter with its sources (``params``) and a sensitivity table
(:func:`latency_sensitivity`).

B11, format: the cold rounds read every format once per round in a shuffled order with its
pages evicted first, so ``epoch`` is the round and the per-sample times of two formats are
paired samples (``timing.summarize(..., paired=True)``, ``timing.compare_timings``). The
latency emulation adds ``files_opened × latency`` to each measured cold epoch: exact for a
reader that opens its files one after another (``num_workers=0``, as measured), an upper
bound of the added time with workers that open files concurrently.
"""

from __future__ import annotations

from mfulab.errors import ParameterError
from mfulab.measure.timing import Timing, compare_timings, summarize
from mfulab.studies.dataloader import disk
from mfulab.studies.dataloader.params import FORMAT_RATIO_DRIFT, PER_FILE_LATENCY_SWEEP_S
from mfulab.studies.dataloader.stated import B11_STATED
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim
from mfulab.units import MIB

SMALL_FILES, SHARDS = "json_files", "tar"
CATEGORIES = verdicts.B2_CATEGORIES  # the losses; "scheduling waste": checkpoint writes and the loop


def usable_cpus(records) -> int:
    """Cores the measuring process could run on (older records: ``cpu_count``)."""
    return records.get("usable_cpus", records.get("cpu_count"))


def _param(records, name, default):
    return records["params"].get(name, default)


# ---------------------------------------------------------------------------- B11, format
def cold_rows(records, fmt: str) -> list[dict]:
    rows = [r for r in records["sweep"] if r["cache"] == "cold" and r["format"] == fmt]
    return sorted(rows, key=lambda r: r["epoch"])


def cold_timing(records, fmt: str, latency_s: float = 0.0) -> Timing:
    """Seconds per sample of every cold round of ``fmt`` (paired by round), with
    ``latency_s`` added per file the epoch opened (the emulated network file system)."""
    rows = cold_rows(records, fmt)
    per_sample = [(r["epoch_s"] + r["files_opened"] * latency_s) / r["samples"] for r in rows]
    return summarize(per_sample, label=fmt, paired=True)


def format_comparison(records, latency_s: float = 0.0):
    """tar shards over small JSON files: ``ratio`` = tar's throughput / the small files', the
    interval widened by ``format_ratio_drift`` (this ratio's run-to-run drift, see params)."""
    return compare_timings(
        cold_timing(records, SMALL_FILES, latency_s),
        cold_timing(records, SHARDS, latency_s),
        run_to_run_drift=_param(records, "format_ratio_drift", FORMAT_RATIO_DRIFT),
    )


def _opens_per_sample(records, fmt: str) -> float:
    rows = cold_rows(records, fmt)
    return summarize([r["files_opened"] / r["samples"] for r in rows]).median_s


def break_even_latency_s(records, gain: float = B11_STATED["min_throughput_gain"]) -> float:
    """The per-file latency L at which tar's median throughput is ``gain`` × the small files':
    (t_small + n_small·L) / (t_tar + n_tar·L) = gain, per sample; 0 when tar already gains
    that much on this disk (L ≤ 0)."""
    t_small, t_tar = (cold_timing(records, f).median_s for f in (SMALL_FILES, SHARDS))
    n_small, n_tar = (_opens_per_sample(records, f) for f in (SMALL_FILES, SHARDS))
    denominator = n_small - gain * n_tar
    if denominator <= 0:
        return float("inf")
    return max(0.0, (gain * t_tar - t_small) / denominator)


def latency_sensitivity(records, latencies_s=None):
    """B11 over the assumed per-file latency: per latency, both formats' median epoch time,
    tar / small files throughput with its interval, and the verdict at the 1.05× threshold,
    labelled as a toy regime's (the loader alone, an emulated latency: "shown" at most)."""
    import pandas as pd

    if latencies_s is None:
        latencies_s = _param(records, "per_file_latency_sweep_s", PER_FILE_LATENCY_SWEEP_S)
    if not (cold_rows(records, SMALL_FILES) and cold_rows(records, SHARDS)):
        latencies_s = []  # no cold rounds of the two formats (cold: false, or a format left out)
    samples = records["corpus"]["count"]
    columns = [
        "per_file_latency_ms",
        f"{SMALL_FILES}_epoch_s",
        f"{SHARDS}_epoch_s",
        "tar_over_json_files",
        "ratio_lo",
        "ratio_hi",
        "reading",
    ]
    rows = []
    for latency in latencies_s:
        c = format_comparison(records, latency)
        rows.append(
            {
                "per_file_latency_ms": latency * 1e3,
                f"{SMALL_FILES}_epoch_s": cold_timing(records, SMALL_FILES, latency).median_s * samples,
                f"{SHARDS}_epoch_s": cold_timing(records, SHARDS, latency).median_s * samples,
                "tar_over_json_files": c.ratio,
                "ratio_lo": c.ratio_lo,
                "ratio_hi": c.ratio_hi,
                # 0 ms: this disk, measured cold; above: the same epochs plus files × latency
                # (arithmetic on the measured epochs, not a verdict)
                "reading": "measured (this disk, cold)" if latency == 0 else "emulated: + files × latency",
            }
        )
    return pd.DataFrame(rows, columns=columns)


def _regime(records) -> str:
    corpus, written = records["corpus"], records["written"]
    on_disk = (
        f" ({written[SMALL_FILES]['bytes'] / corpus['count']:.0f} vs "
        f"{written[SHARDS]['bytes'] / corpus['count']:.0f} B per sample on disk; tar members carry a "
        "512-B header, no PAX header)"
        if all("bytes" in written[f] for f in (SMALL_FILES, SHARDS))
        else ""
    )
    return (
        f"{corpus['count']} samples ({corpus['bytes_of_text'] / MIB:.1f} MiB of text) as "
        f"{written[SMALL_FILES]['files']} JSON files vs {written[SHARDS]['files']} tar shards{on_disk}, "
        f"num_workers=0, {len(cold_rows(records, SHARDS))} interleaved rounds"
    )


def loader_alone_text(records) -> str:
    """B11's second reading, the loader alone (samples/s, no training) on this machine's local disk,
    cold: a clause for the training-loop row's evidence, not a row (a loader's samples/s is not the
    quantity the article states, and where the loader has headroom over the step it moves no step).
    Empty unless both formats ran cold."""
    if not (cold_rows(records, SHARDS) and cold_rows(records, SMALL_FILES)):
        return ""
    c = format_comparison(records)
    resident = max(r["resident_after_evict"] for r in records["sweep"] if r["cache"] == "cold")
    us = {f: cold_timing(records, f).median_s * 1e6 for f in (SMALL_FILES, SHARDS)}
    warm = ""
    if 0 in records["params"]["num_workers"]:
        small, shards = _warm_timing(records, SMALL_FILES, 0), _warm_timing(records, SHARDS, 0)
        w = compare_timings(small, shards)
        warm = (
            f"; warm page cache, 0 workers (the figure of §2 compares each format's best setting) "
            f"{small.median_s * 1e6:.0f} vs {shards.median_s * 1e6:.0f} µs per sample: tar "
            f"at {w.ratio:.2f}× [{w.ratio_lo:.2f}, {w.ratio_hi:.2f}] (with the pages cached, tar's "
            "per-member parsing is what is left)"
        )
    cold = [r for r in records["sweep"] if r["cache"] == "cold"]
    metadata = (
        "directory entries and inodes dropped too"
        if all(r.get("metadata_dropped") for r in cold)
        else "directory entries and inodes cached: dropping them needs root"
    )
    few = (
        f"; {len(cold_rows(records, SHARDS))} rounds: about the range of the rounds' own ratios, "
        "not a 95% interval"
        if len(cold_rows(records, SHARDS)) < 6
        else ""
    )
    return (
        ". A second reading, the loader alone (samples/s, no training; a toy regime, not a verdict): "
        f"cold epochs on this local disk (at most {resident:.0%} of a format's pages resident; {metadata}; "
        f"{_regime(records)}), tar / JSON files {c.ratio:.2f}× [{c.ratio_lo:.2f}, {c.ratio_hi:.2f}] "
        "samples/s "
        f"(widened ±{c.run_to_run_drift:.0%}{few}), {us[SMALL_FILES]:.0f} vs {us[SHARDS]:.0f} µs per sample"
        f"{warm}" + (f"; {disk.describe(records)}" if "disk" in records else "")
    )


# ---------------------------------------------------------------------------- B11, workers
def _warm_timing(records, fmt: str, workers: int, persistent: bool = False) -> Timing:
    """Seconds per sample of every warm epoch of one setting (paired by round: the warm sweep
    runs one epoch of every setting per round)."""
    rows = sorted(
        (
            r
            for r in records["sweep"]
            if r["cache"] == "warm"
            and r["format"] == fmt
            and r["num_workers"] == workers
            and r["persistent_workers"] == persistent
        ),
        key=lambda r: r["epoch"],
    )
    return summarize([r["epoch_s"] / r["samples"] for r in rows], label=f"{fmt}/{workers}", paired=True)


def workers_cpus_needed(hi: int = B11_STATED["workers_enough"][1]) -> int:
    """Usable CPUs the workers row needs: 'enough' means a count above ``hi`` gains nothing,
    so the sweep needs ``hi`` + 1 workers, each on its own core beside the training process."""
    return hi + 2


def headroom(need) -> dict | None:
    """One cold loader process here against a case-study rank's need
    (``text_job.required_vs_available``): the headroom's range over the formats, and the
    rank's need in tokens/s and in bytes of text per second; None without the table."""
    if need is None or need.empty:
        return None
    out = {
        "lo": float(need.headroom_one_process.min()),
        "hi": float(need.headroom_one_process.max()),
        "tokens_per_s": float(need.required_tokens_per_s_per_rank.iloc[0]),
        "text_bytes_per_s": float(need.required_text_bytes_per_s_per_rank.iloc[0]),
    }
    text = need[need.format != "memmap"]  # memmap holds tokens already
    if "headroom_one_process_tokenizing" in need and not text.empty:  # also tokenizing (text_job)
        out["tokenizing_lo"] = float(text.headroom_one_process_tokenizing.min())
        out["tokenizing_hi"] = float(text.headroom_one_process_tokenizing.max())
    return out


def tokenizing_text(h: dict | None) -> str:
    """The headroom again with each text a byte-level BPE tokenizes on the same core."""
    if not h or "tokenizing_lo" not in h:
        return ""
    return (
        f", {h['tokenizing_lo']:,.0f}–{h['tokenizing_hi']:,.0f}× where it also tokenizes every document "
        "with a byte-level BPE trained here, on the same core (memmap holds tokens already)"
    )


def _toy_sweep_text(records) -> str:
    """The worker sweep on this box, a toy line for the workers row's evidence."""
    lo, hi = B11_STATED["workers_enough"]
    cpus = usable_cpus(records)
    counts = list(records["params"]["num_workers"])
    fits = sorted(w for w in counts if 0 < w and w + 1 <= cpus)
    text = (
        f". On this box (a toy: short text samples, no decode) the sweep ran {counts} workers on {cpus} "
        f"usable CPUs; a count above {hi} beside the training process needs ≥ {workers_cpus_needed(hi)}"
    )
    if len(fits) >= 2:
        slow, fast = (_warm_timing(records, SHARDS, w, True) for w in (fits[0], fits[-1]))
        c = compare_timings(slow, fast)
        text += f"; {fits[-1]} over {fits[0]} workers, warm tar: {c.ratio:.2f}× "
        text += f"[{c.ratio_lo:.2f}, {c.ratio_hi:.2f}]"
    return text


def _range_ends_text(needed: dict, rates: dict, *, edge: bool = True) -> str:
    """How many published rates the range's two ends keep fed, and (``edge``) the decode cost per
    image at which its lower end would keep up with the fastest rate."""
    lo, hi = B11_STATED["workers_enough"]
    fastest = max(rates.values())
    ends = "; ".join(
        f"{sum(n <= end for n in needed.values())} of {len(needed)} rates within {end} workers"
        for end in (hi, lo)
    )
    if not edge:
        return ends
    return ends + (
        f" ({lo} keep up with {fastest:,.0f} img/s only where an image costs ≤ {lo / fastest * 1e3:.1f} ms "
        "of CPU: the count rides on the host's per-sample cost, which the sentence leaves to the reader)"
    )


def budget_decode_s() -> float:
    """The per-image CPU time NVIDIA's published configuration allows each worker: its workers per
    GPU over its fastest published rate per GPU (10 / 2,470 img/s = 4.0 ms on a DGX A100's
    cores). A host whose decode takes that whole budget is a reading of the CV job beside the
    decode measured here (a CPU the article's hosts need not resemble)."""
    from mfulab.studies.dataloader.stated import A100_RESNET50

    return A100_RESNET50["workers_per_gpu"] / max(A100_RESNET50["images_per_s_per_gpu"].values())


def b11_workers(records, need=None) -> Claim:
    """ "On ordinary SSDs 8-16 DataLoader workers are enough", decided by analysis
    (``verdicts.at_stated_case``). The stated case is the article's own job, the case study's
    text loader (its DataLoader has 12 workers): enough when one loader process already reads
    what a rank needs (``need``: ``text_job.required_vs_available``). The sensitivity is the
    CV job §4.1 speaks of (``image_job``): a GPU at each published A100 ResNet-50 rate needs
    rate × the decode cost workers (a local SSD's per-file latency left out), at the decode
    measured here and at NVIDIA's per-worker budget (:func:`budget_decode_s`): the host is not
    this box. The range is read at both ends: no job needs more than 16, and even 8 keep it fed;
    a rate that needs more than either end reverses the stated case. The sweep is a toy."""
    from mfulab.studies.dataloader.image_job import median_decode_s, workers_needed
    from mfulab.studies.dataloader.stated import A100_RESNET50

    lo, hi = B11_STATED["workers_enough"]
    claim = f"on ordinary SSDs {lo}–{hi} DataLoader workers are enough"
    h = headroom(need)
    stated = (
        None if h is None else min(h["lo"], h.get("tokenizing_lo", h["lo"])) >= 1
    )  # one worker feeds a rank
    decode_s = median_decode_s(records)
    rates = A100_RESNET50["images_per_s_per_gpu"]
    needed = {k: workers_needed(v, decode_s) for k, v in rates.items()} if decode_s else {}
    budget = {k: workers_needed(v, budget_decode_s()) for k, v in rates.items()} if decode_s else {}
    # both ends of the range, both hosts: a rate needing more than 16, or than 8, reverses the stated case
    counts = [*needed.values(), *budget.values()]
    decision = verdicts.at_stated_case(stated, [n <= end for end in (hi, lo) for n in counts])
    text = (
        "not computed (no cold loader table)"
        if h is None
        else f"the case study's rank needs {h['text_bytes_per_s'] / 1e3:.0f} kB/s of text and one cold "
        f"loader process here reads {h['lo']:.0f}–{h['hi']:.0f}× that{tokenizing_text(h)}, so one worker "
        "keeps up and the article's 12 are more than enough"
    )
    image = (
        f". The CV job §4.1 speaks of: a {records['image_decode']['jpeg_bytes'] / 1e3:.0f} kB JPEG decoded, "
        f"cropped, flipped and normalised takes {decode_s * 1e3:.1f} ms on one core here, so a GPU at "
        "NVIDIA's published ResNet-50 rates needs "
        + ", ".join(f"{n:.1f} workers ({k}, {rates[k]:,.0f} img/s)" for k, n in needed.items())
        + f"; NVIDIA runs {A100_RESNET50['workers_per_gpu']} per GPU on a DGX A100's "
        f"{A100_RESNET50['cpu_cores_per_gpu']} cores per GPU, and its mixed-precision run scales 6.72× on 8 "
        "GPUs where TF32 scales 7.72× (DeepLearningExamples): "
        + _range_ends_text(needed, rates)
        + f". A host whose decode takes NVIDIA's whole per-worker budget, {budget_decode_s() * 1e3:.1f} ms "
        f"({A100_RESNET50['workers_per_gpu']} workers for {max(rates.values()):,.0f} img/s): "
        + _range_ends_text(budget, rates, edge=False)
        if needed
        else ". The CV job is not computed (no decode probe in these measurements)"
    )
    return Claim(
        "B11",
        claim,
        "the article's own DataLoader (§4.1's snippet: num_workers=12, batch 8) on its own job (§5's 7B "
        "text model): what a rank needs against one loader process; the CV job §4.1 names: workers a GPU "
        "needs at published A100 ResNet-50 rates, at the decode cost measured here",
        decision,
        f"text: {text}{image} (tables/image_job.csv){_toy_sweep_text(records)}",
        basis=verdicts.ANALYSIS,
    )


# ---------------------------------------------------------------------------- B2 (data part)
def step_split(run) -> dict:
    """Seconds over a stall run's steps (the first, with the loader's start-up, left out) as B2's
    useful compute and four losses: slow operators (the compute beyond the steps' model FLOPs at
    the run's matmul ceiling, ``verdicts.b2_compute_split``), communication wait (0: one process
    runs no collective), data wait (for the batch) and scheduling waste (the rest of the step:
    checkpoint writes, the loop). An emulated step is a timed wait standing in for an
    accelerator's step: all of it useful compute, no slow operators by construction."""
    steps = run["steps"][1:]
    compute = sum(s["compute_s"] for s in steps)
    data = sum(s["wait_s"] for s in steps)
    total = sum(s["step_s"] for s in steps)
    if run["compute"] == "emulated compute":
        split = {verdicts.B2_USEFUL: compute, "slow operators": 0.0}
    elif "ceiling_flops_per_s" not in run or "model_flops" not in steps[0]:
        raise ParameterError(
            "these stall records predate B2's useful compute (no model FLOPs or ceiling): re-measure"
        )
    else:
        model_flops = sum(s["model_flops"] for s in steps)
        split = verdicts.b2_compute_split(compute, model_flops, run["ceiling_flops_per_s"])
    return {**split, "communication wait": 0.0, "data wait": data, "scheduling waste": total - compute - data}


def nonzero_categories(run, floor: float) -> list[str]:
    """The categories above ``floor`` × the run's time."""
    split = step_split(run)
    total = sum(split.values())
    return [k for k in CATEGORIES if split[k] > floor * total]


def stall_runs(records, compute: str, *, in_memory: bool = False) -> list[dict]:
    """The stall runs of one compute mode: those with a loader, or (``in_memory``) the one
    with batches pre-loaded in memory."""
    return [
        r for r in records["stall"] if r["compute"] == compute and (r["format"] == "in-memory") == in_memory
    ]
