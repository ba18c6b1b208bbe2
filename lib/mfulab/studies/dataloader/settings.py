"""B11's loader settings part: "a larger ``prefetch_factor``, ``persistent_workers=True`` and
``pin_memory=True`` hide I/O and speed host-to-device copies" (article B §4.1).

What the warm sweep measures of it is ``persistent_workers``: a loader without it starts new
worker processes at every epoch, one with it keeps them, so the first batch of every epoch
after the first is the restart's cost (or its absence). The warm sweep runs one epoch of every
setting per round in a shuffled order, so the first-batch times of the two settings of one
format and worker count in one round are paired samples. That kept workers are not restarted
is the option's documented behaviour, so the row is true by construction (*shown*) and the
timing gives its size: the drift-widened interval of new / kept workers, with the whole epoch's
throughput beside it (a restart saved is not an epoch made faster). ``prefetch_factor`` is one
value in the sweep, compared in its own rows on the ``prefetch`` harness's loaders, and
``pin_memory`` only acts on a copy to a CUDA device (never compared).
"""

from __future__ import annotations

from mfulab.measure.timing import compare_timings, summarize
from mfulab.studies.dataloader import hiding, prefetch
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim

CLAIM = (
    "persistent_workers=True hides the workers' restart at each new epoch (part of: a larger "
    "prefetch_factor, persistent_workers=True and pin_memory=True hide I/O and speed host-to-device copies)"
)


def setting_pairs(records, field: str) -> list[tuple[int, float, float]]:
    """(round, new workers, kept workers) values of ``field`` (``first_batch_s``, ``epoch_s``) for
    one format and worker count in one round of the warm sweep, where both settings ran, ordered
    by format, worker count and round."""
    values = {
        (r["format"], r["num_workers"], r["epoch"], r["persistent_workers"]): r[field]
        for r in records["sweep"]
        if r["cache"] == "warm" and r["num_workers"] > 0 and r.get(field) is not None
    }
    return [
        (e, new, values[(fmt, w, e, True)])
        for (fmt, w, e, pers), new in sorted(values.items())
        if not pers and (fmt, w, e, True) in values
    ]


def restart_pairs(records, *, later: bool = True) -> list[tuple[float, float]]:
    """(new workers, kept workers) first-batch seconds of one format, worker count and round of
    the warm sweep; ``later``: rounds after the first (a persistent loader's workers exist
    already), else the first round (both start theirs)."""
    return [(new, kept) for e, new, kept in setting_pairs(records, "first_batch_s") if (e > 0) == later]


def restart_comparison(records):
    """Paired comparison of the later epochs' first batch: new workers (baseline) over kept
    workers, so ``ratio`` > 1 means persistent workers start an epoch sooner; None with fewer
    than two pairs."""
    pairs = restart_pairs(records)
    if len(pairs) < 2:
        return None
    new = summarize([a for a, _ in pairs], label="new workers each epoch", paired=True)
    kept = summarize([b for _, b in pairs], label="persistent workers", paired=True)
    return compare_timings(new, kept)


def epoch_ratios(records) -> dict | None:
    """Whole warm epochs (workers > 0), new workers each epoch over persistent ones, one ratio per
    format × worker count × round (> 1: the persistent loader's epoch was shorter): the median,
    range and count of the per-pair ratios, and how many of the later rounds' pairs (where a
    persistent loader's workers exist already) fell below 1. Formats read at different speeds, so
    the pairs are compared as ratios, never pooled into medians of seconds. None without pairs."""
    import numpy as np

    pairs = [(e, new / kept) for e, new, kept in setting_pairs(records, "epoch_s")]
    if not pairs:
        return None
    ratios = np.array([x for _, x in pairs])
    later = [x for e, x in pairs if e > 0]
    return {
        "median": float(np.median(ratios)),
        "lo": float(ratios.min()),
        "hi": float(ratios.max()),
        "pairs": len(pairs),
        "later_pairs": len(later),
        "later_below_one": sum(x < 1 for x in later),
    }


def _pin_memory_text(records) -> str:
    pinned = {r.get("pin_memory", False) for r in records["sweep"]}
    if pinned == {False}:
        return "pin_memory: not checkable here (it only speeds a copy to a CUDA device; this run copies none)"
    return "pin_memory: on in every setting of this run, not compared"


def _epoch_reading(e: dict, epoch_s: float, restart_s: float) -> str:
    """What the whole epochs say beside the first batch: the ratio the saved restart alone would
    give, epoch ÷ (epoch − restart), against the measured range (round thirty-two's reader: the
    sentence used to say "not a faster epoch" whatever the range)."""
    alone = epoch_s / (epoch_s - restart_s) if 0 < restart_s < epoch_s else 1.0
    if e["lo"] > 1:
        more = "more than" if e["lo"] > alone else "about what"
        return (
            f"the persistent epochs ran faster over the whole range, {more} the saved restart alone "
            f"gives ({alone:.2f}×)"
        )
    return (
        f"the range spans 1, so whole epochs do not tell the two apart here (the saved restart alone "
        f"would give {alone:.2f}×)"
    )


def b11_settings(records) -> Claim:
    rp = records["params"]
    c = restart_comparison(records)
    settings = (
        f"prefetch_factor={rp.get('prefetch_factor', 2)} in every setting of the loader sweep (compared "
        "in the prefetch rows, on a bursty and a uniformly slow loader); "
    )
    if c is None:
        return Claim(
            "B11",
            CLAIM,
            "first batch of warm epochs after the first, with and without persistent workers",
            "not checkable",
            "needs a worker count above 0 and at least 2 warm rounds, run with and without persistent "
            f"workers (num_workers={list(rp['num_workers'])}, {rp.get('epochs', '?')} rounds); "
            + settings
            + _pin_memory_text(records),
            basis=verdicts.MEASURED,
        )
    pairs, first = restart_pairs(records), restart_pairs(records, later=False)
    new_ms = summarize([a for a, _ in pairs]).median_s * 1e3
    kept_ms = summarize([b for _, b in pairs]).median_s * 1e3
    epoch_s = summarize(
        [
            r["epoch_s"]
            for r in records["sweep"]
            if r["cache"] == "warm" and r["num_workers"] > 0 and not r["persistent_workers"]
        ]
    ).median_s
    first_text = ""
    if first:
        f_new, f_kept = (summarize([p[i] for p in first]).median_s * 1e3 for i in (0, 1))
        first_text = f"; first round, where both start workers: {f_new:.0f} vs {f_kept:.0f} ms"
    e = epoch_ratios(records)
    whole = (
        f"; whole warm epochs, new over persistent workers, per format × worker count × round: median "
        f"{e['median']:.2f}× ({e['lo']:.2f}–{e['hi']:.2f}, {e['pairs']} pairs; in the later rounds "
        f"{e['later_below_one']} of {e['later_pairs']} persistent epochs were the longer): "
        + _epoch_reading(e, epoch_s, (new_ms - kept_ms) / 1e3)
        if e is not None
        else ""
    )
    # kept workers are not restarted: the option's documented behaviour (DataLoader's docs:
    # persistent_workers keeps the worker processes after a dataset has been consumed once), so
    # the row is confirmed on the documentation, as pin_memory's is; the timing is its size here
    return Claim(
        "B11",
        CLAIM,
        "PyTorch's DataLoader documentation (persistent_workers keeps the worker processes across "
        "epochs); its size here: first batch of warm epochs after the first, new vs persistent "
        f"workers, paired by format × worker count × round ({len(pairs)} pairs, settings interleaved)",
        "confirmed",
        f"median first batch {new_ms:.0f} ms with new workers vs {kept_ms:.0f} ms with persistent ones: "
        f"{c.ratio:.1f}× [{c.ratio_lo:.1f}, {c.ratio_hi:.1f}] (95% bootstrap over the {len(pairs)} pairs, "
        f"near their range at so few, widened by ±{c.run_to_run_drift:.0%} drift)"
        + ("" if c.verdict == "faster" else " (the timing does not separate them here)")
        + f"; the restart is {(new_ms - kept_ms) / 1e3 / epoch_s:.0%} of a warm epoch "
        f"here ({epoch_s:.2f} s), a share that vanishes where an epoch takes hours, as in pretraining"
        f"{whole}{first_text}; " + settings + _pin_memory_text(records),
        basis=verdicts.DOCUMENTED,
    )


# Article B §4.1 (its launch line has --shm-size=32g): "--shm-size must be generous: the
# DataLoader's pinned and shared memory use /dev/shm, and the default 2MB is often not enough,
# so multi-worker IPC fails or slows sharply". Docker's documented default for /dev/shm is 64 MB
# (docker run --shm-size; moby/moby #29492 asks for a daemon-wide default because 64 MB is
# often too small); PyTorch's own docs give the advice (workers share batches through shared
# memory: run with --ipc=host or a larger --shm-size).
DOCKER_DEFAULT_SHM_BYTES = 64 * 2**20
B11_SHM_STATED_BYTES = 2 * 2**20


def b11_shm_claims(records) -> list[Claim]:
    """§4.1's sentence on /dev/shm (--shm-size也要给足，因为DataLoader的lock页内存和共享内存会占用
    /dev/shm，默认2MB经常不够用), one row per statement in it, each against documentation: the
    default's size (refuted where it differs from Docker's documented 64 MB), the workers' batches
    passing through shared memory so that a small /dev/shm breaks multi-worker loading (PyTorch's
    docs say so: confirmed), and page-locked ("lock页") memory living in /dev/shm (refuted: pinned
    buffers are page-locked anonymous host memory from the CUDA allocator, not files in
    /dev/shm)."""
    # the article's DataLoader (§4.1): batch 8, num_workers 12, prefetch_factor 4
    in_flight = 12 * 4
    text_mib = in_flight * 8 * 4096 * 8 / 2**20  # int64 token ids
    image_mib = in_flight * 8 * 3 * 224 * 224 * 4 / 2**20  # float32 RGB 224²
    return [
        Claim(
            "B11",
            "Docker's default /dev/shm is 2 MB (默认2MB)",
            "the stated default against Docker's documented one (docker run --shm-size)",
            verdicts.verdict_from_agreement(B11_SHM_STATED_BYTES == DOCKER_DEFAULT_SHM_BYTES),
            f"Docker's default /dev/shm is {DOCKER_DEFAULT_SHM_BYTES / 2**20:.0f} MiB, not "
            f"{B11_SHM_STATED_BYTES / 2**20:.0f} MB",
            basis=verdicts.DOCUMENTED,
        ),
        Claim(
            "B11",
            "multi-worker DataLoaders pass data through /dev/shm, so a small one makes their IPC fail or "
            "slow: give --shm-size generously",
            "PyTorch's documentation of multiprocessing data loading in containers",
            "confirmed",
            "workers hand batches to the main process through shared memory, and PyTorch's docs tell "
            "container users to run with --ipc=host or a larger --shm-size because the default segment "
            "is not enough: a full segment fails (a bus error), which is documented; a sharp slowdown is "
            f"not. At the article's own DataLoader (batch 8, 12 workers, prefetch_factor 4: {in_flight} "
            f"batches in flight) token batches of 4,096 int64s take {text_mib:.0f} MiB, inside Docker's "
            f"64 MiB; 224² RGB float32 images would take {image_mib:.0f} MiB: the advice matters for CV "
            "inputs, not for the case study's text",
            basis=verdicts.DOCUMENTED,
        ),
        Claim(
            "B11",
            "the DataLoader's page-locked (pinned) memory takes /dev/shm (lock页内存…会占用/dev/shm)",
            "where pin_memory's buffers live, against PyTorch's and CUDA's documentation",
            "refuted",
            "pin_memory=True copies each batch into page-locked host memory from the CUDA host allocator "
            "(cudaHostAlloc): page-locked anonymous memory, not a file in /dev/shm; only "
            "the workers' shared tensors use /dev/shm, so the sentence's advice stands on its second half",
            basis=verdicts.DOCUMENTED,
        ),
    ]


def _prefetch_text(h: dict, case: str) -> str:
    ratios = ", ".join(f"{r:.2f}" for r in h["ratios"])
    said = {True: "hides it", False: "no effect", None: "cannot tell"}[h["hides"]]
    return (
        f"{case} loader: mean wait per step at prefetch_factor {h['largest']} over {h['smallest']}, per "
        f"round, {ratios} ({said}; hides below {prefetch.HIDES_BELOW:g}, no effect above "
        f"{prefetch.NO_EFFECT_ABOVE:g})"
    )


def b11_prefetch_claim(records) -> Claim:
    """ "A larger prefetch_factor lets the CPU prepare several batches ahead, hiding I/O latency"
    (§4.1, layer 2): PyTorch documents ``prefetch_factor`` as the batches each worker loads in
    advance (2 by default), so W workers keep up to W × prefetch_factor batches ready. Its
    mechanism, a slow batch started earlier, is measured on a bursty loader (``prefetch``, toy
    regime): shown where the larger value hides the bursts, not shown where it has no effect. A
    loader slower on average than the step is the next row's (layer 3's) case. Without the
    measurement, the documented analysis alone (not checkable: it reads two ways)."""
    bursty = prefetch.hides(records, "bursty")
    if bursty is None:
        value = records["params"].get("prefetch_factor", 2)
        return Claim(
            "B11",
            "a larger prefetch_factor hides I/O",
            "PyTorch's DataLoader documentation (prefetch_factor: batches loaded in advance by each worker), "
            "under both readings",
            "not checkable",
            "read as hiding bursts: true by construction, W workers keep up to W × prefetch_factor batches "
            "ready, so a burst of slow reads shorter than that slack never reaches the step; read as hiding "
            "a loader slower on average than the step: false, the buffer drains at the loader's mean rate "
            "and the wait returns once it is empty. The readings disagree. This run: "
            f"prefetch_factor={value} in every setting, not measured apart",
            basis=verdicts.DOCUMENTED,
        )
    decision = {True: "confirmed", False: "refuted", None: "inconclusive on this machine"}[bursty["hides"]]
    gate = "" if bursty["intact"] else "; A BATCH FAILED ITS GATE"
    return Claim(
        "B11",
        "a larger prefetch_factor lets the CPU prepare batches ahead, hiding I/O latency (§4.1, layer 2)",
        "the mean wait per step at the smallest and largest prefetch_factor of a loader whose slow batches "
        "come in bursts, paired by round",
        decision,
        _prefetch_text(bursty, "bursty")
        + ": a deeper buffer starts a slow batch earlier; a loader slower on average is the next row's"
        + gate,
        basis=verdicts.TOY,
    )


def b11_uniform_prefetch_claim(records) -> Claim | None:
    """§4.1, layer 3: 「如果是均匀地慢，优先改格式和prefetch」 (if loading is uniformly slow, change the
    format and prefetch first). Its format half is the rows above. Its prefetch half reads two ways,
    ranked by the article's own words (as A10's readings are): layer 2, two sentences before, names
    prefetch as ``prefetch_factor`` (「prefetch_factor加大可以让CPU提前准备多个batch的数据」), so the
    reading that decides is (a): a larger ``prefetch_factor`` on a loader slower on average than the
    step does not help, by flow conservation (a buffer fills no faster than its workers load, so
    the steady wait is max(0, load / W − step) whatever its depth), measured on the uniformly slow
    loader of ``prefetch``: refuted (analysis) unless the larger value hides that loader's wait
    (then analytic only). Reading (b), loading ahead in worker processes where the loader ran inline
    (num_workers=0), does remove a uniform wait (the hiding runs, ``hiding``): in the evidence, as
    the lower-ranked reading. None where (a) was not measured."""
    uniform = prefetch.hides(records, "uniform")
    if uniform is None:
        return None
    decision = "analytic only" if uniform["hides"] is True else "refuted"
    hid = hiding.hiding_table(records)
    inline = hid[hid.workers == 0]
    ahead = hid[hid.workers > 0]
    reading_b = (
        f"; the lower-ranked reading, loading ahead in workers where the loader ran inline, does help: "
        f"the hiding runs wait {inline.measured_wait_ms.iloc[0]:.1f} ms per step inline and "
        f"{ahead.measured_wait_ms.iloc[-1]:.1f} ms with {int(ahead.workers.iloc[-1])} workers "
        "(tables/b11_latency_hiding.csv)"
        if len(inline) and len(ahead)
        else "; the lower-ranked reading, loading ahead in workers where the loader ran inline, does help "
        "(the hiding runs were not measured here)"
    )
    return Claim(
        "B11",
        "a uniformly slow loader: change the format and prefetch first (§4.1, layer 3; its format half: "
        "the rows above)",
        "flow conservation for prefetch_factor, the reading layer 2 defines (a buffer drains at the loader's "
        "mean rate, so the steady wait, max(0, load / W − step), does not depend on its depth), checked on a "
        "uniformly slow loader, paired by round",
        decision,
        _prefetch_text(uniform, "uniformly slow")
        + ": a buffer filled no faster than it empties; more workers or a faster format shorten each load"
        + ("" if uniform["intact"] else "; A BATCH FAILED ITS GATE")
        + reading_b,
        basis=verdicts.ASSUMED,
    )


def b11_pin_memory_claim() -> Claim:
    """ "pin_memory=True speeds host-to-device copies": PyTorch's documentation (host-to-GPU
    copies are faster from pinned, page-locked memory, and only pinned memory allows an
    asynchronous copy, ``non_blocking=True``); this CPU run copies to no device, so nothing is
    timed here."""
    return Claim(
        "B11",
        "pin_memory=True speeds host-to-device copies",
        "PyTorch's documentation of memory pinning (CUDA semantics; DataLoader's pin_memory)",
        "confirmed",
        "host-to-GPU copies are faster from pinned (page-locked) memory, and a copy with "
        "non_blocking=True overlaps compute only from pinned memory; the DataLoader's pin_memory "
        "puts each batch there. Not timed here: this run copies to no GPU",
        basis=verdicts.DOCUMENTED,
    )
