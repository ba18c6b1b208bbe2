"""A3's two rows (:func:`a3_claim`: the mechanism, how much an accelerator recovers) and its
contention sweep on a CPU: between the emulated engine (a timed wait that leaves the cores to
gloo, duty 0) and real compute (matmuls on the cores gloo's threads need, duty 1), each chunk's
compute interval spends a share ``duty`` in real matmuls and
waits out the rest. Per duty, paired over interleaved rounds, as A3 reads its two modes
(``analysis.a3_outcome``):

    serial_s     = median step at k = 1
    overlapped_s = median step at k = A3_K (4)
    bound_s      = median over rounds of max(compute only at k = 4, communication only at k = 1)
    recovered    = (serial_s − overlapped_s) / (serial_s − bound_s)

An accelerator sits somewhere on this axis: its collectives take a few of its SMs and some of its
memory bandwidth (NCCL's channels), not the whole engine; where, is the device's, not this box's."""

from __future__ import annotations

import numpy as np

from mfulab.measure.timing import compare_timings, summarize
from mfulab.studies.overlap.a5_rows import interval_text
from mfulab.studies.overlap.stated import A3_K
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim


def duty_row(duty: float, times: dict, k: int = A3_K) -> dict:
    """One duty cycle's A3 reading from its interleaved rounds (``times``: ``"<variant>:<k>"`` →
    per-round step times)."""
    serial = np.asarray(times["overlapped:1"], dtype=float)
    overlapped = np.asarray(times[f"overlapped:{k}"], dtype=float)
    bound = np.maximum(times[f"compute_only:{k}"], times["comm_only:1"])
    serial_s, overlapped_s, bound_s = (float(np.median(x)) for x in (serial, overlapped, bound))
    possible_s = serial_s - bound_s
    c = compare_timings(
        summarize(serial, label="serial k=1", paired=True),
        summarize(overlapped, label=f"overlapped k={k}", paired=True),
    )
    return {
        "duty": duty,
        "serial_ms": serial_s * 1e3,
        "overlapped_ms": overlapped_s * 1e3,
        "bound_ms": bound_s * 1e3,
        "recovered_share": (serial_s - overlapped_s) / possible_s if possible_s > 0 else float("nan"),
        "serial_over_overlapped": c.ratio,
        "interval": f"[{c.ratio_lo:.2f}, {c.ratio_hi:.2f}]",
        "moves_toward_bound": c.verdict == "faster",
    }


def duty_table(records, a3: dict | None = None):
    """The sweep's rows, with A3's two modes as its ends where ``a3`` (``derived``'s per-mode A3
    outcomes) has them: the emulated engine at duty 0, real compute at duty 1. Empty where the run
    has no sweep (a GPU run, older records)."""
    import pandas as pd

    rows = [duty_row(r["duty"], r) for r in (records.get("overlap") or {}).get("a3_duty_rows") or []]
    if not rows:
        return pd.DataFrame()
    for duty, mode in ((0.0, "emulated"), (1.0, "real")):
        o = (a3 or {}).get(mode)
        if o:
            c = o["vs_serial"]
            rows.append(
                {
                    "duty": duty,
                    "serial_ms": o["serial_s"] * 1e3,
                    "overlapped_ms": o["overlapped_s"] * 1e3,
                    "bound_ms": o["bound_s"] * 1e3,
                    "recovered_share": o["recovered_share"],
                    "serial_over_overlapped": c.ratio,
                    "interval": f"[{c.ratio_lo:.2f}, {c.ratio_hi:.2f}]",
                    "moves_toward_bound": c.verdict == "faster",
                }
            )
    return pd.DataFrame(rows).sort_values("duty").reset_index(drop=True)


def duty_text(table) -> str:
    """One clause for A3's evidence: the recovered share at each duty cycle, and the highest duty
    at which the overlapped step still beats the serial one."""
    if table.empty:
        return ""
    shares = ", ".join(f"{r.duty:.0%} busy {r.recovered_share:.0%}" for r in table.itertuples())
    moving = table[table.moves_toward_bound]
    last = (
        f"the step still moves toward the bound at {moving.duty.max():.0%} busy"
        if len(moving)
        else "at no duty cycle does the step move toward the bound"
    )
    return (
        f"contention sweep (each compute interval busy on the cores for a share, then waiting): recovered "
        f"{shares}; {last}"
    )


def reachable_step_s(records, mode: str, k: int) -> float | None:
    """The step the k-chunk schedule can reach with this run's own compute and calls (the chapter's
    one formula, T(k) = c + (k − 1)·max(c, m) + m, with c = the compute-only median ÷ k and m = the
    communication-only median ÷ k at that k): the saving overlap at k can recover is serial − T(k),
    not serial − max(compute, comm), which needs infinitely many free chunks (round nineteen's
    reader of chapter 02). None where the run lacks the rows."""
    rows = [r for r in records["overlap"]["rows"] if r["mode"] == mode and r["k"] == k]
    if not rows or not rows[0].get("comm_only_times_s"):
        return None
    c = float(np.median(rows[0]["compute_only_times_s"])) / k
    m = float(np.median(rows[0]["comm_only_times_s"])) / k
    return c + (k - 1) * max(c, m) + m


def _line(o) -> str:
    """One compute mode's A3 reading in words."""
    return (
        f"{o['mode']} compute: serial {o['serial_s'] * 1e3:.1f} ms → {o['overlapped_s'] * 1e3:.1f} ms "
        f"at k={o['k']} (serial ÷ overlapped {interval_text(o['vs_serial'])}) against max(compute, comm) "
        f"{o['bound_s'] * 1e3:.1f} ms: {o['recovered_text']} ((serial − overlapped) ÷ (serial − bound), "
        f"medians; the per-round midpoint (serial + bound)/2 ÷ overlapped "
        f"{interval_text(o['comparison'])})"
    )


def a3_claim(records, outcomes: dict, duty_table_=None) -> list[Claim]:
    """A3 as two rows (round fifteen's reader of chapter 02). The mechanism, overlap takes the
    step toward max(compute, comm): on a GPU real compute decides (measured); on a CPU the ideal
    engine (emulated compute, a wait that leaves the cores to gloo as a GPU's kernels leave the
    host to NCCL) decides, shown when its overlapped step beats the serial one, the contention
    sweep (``duty_table_``, :func:`duty_table`) beside it. How much an accelerator recovers
    (CPU only): where its collectives sit between the idle engine and the two ranks' matmuls
    starving gloo's threads is the device's, so inconclusive on this machine, the two ends as
    its bracket."""
    modes = records["params"]["modes"]
    gpu = records["device"] == "cuda"
    decider = next(
        (m for m in (("real", "emulated") if gpu else ("emulated", "real")) if outcomes.get(m)), None
    )
    if decider is None or decider not in modes:
        return []
    o = outcomes[decider]
    c = o["vs_serial"]
    verdict = verdicts.verdict_from_comparison(c, claimed="faster")
    if verdict == "refuted" and not gpu:
        verdict = "inconclusive on this machine"  # a toy regime cannot refute the claim
    others = [outcomes[m] for m in modes if m != decider and outcomes.get(m)]
    sweep = duty_text(duty_table_) if duty_table_ is not None else ""
    mechanism = Claim(
        "A3",
        "compute 20 ms + comm 10 ms = 30 ms serially; overlap takes the step toward max(compute, comm)",
        f"{decider} compute, {records['overlap']['world_size']} ranks, comm ÷ compute "
        f"{o['comm_over_compute']:.2f} (claim: 0.5): interleaved serial (k=1), k={o['k']} "
        "(fixed in advance), "
        "compute only, comm only; "
        + ("measured" if gpu else "the ideal engine decides, the contention sweep beside it")
        + f"; {'confirmed' if gpu else 'shown'} when the overlapped step is shorter than the serial one "
        f"(interval widened by {c.run_to_run_drift:.0%} run-to-run drift)",
        verdict,
        _line(o) + (f"; {sweep}" if sweep else ""),
        basis=verdicts.MEASURED if gpu else verdicts.TOY,
    )
    if gpu or not others:
        return [mechanism]
    shares = {x["mode"]: x["recovered_share"] for x in (o, *others)}
    stretch = [
        f"{x['mode']} {interval_text(x['comm_stretch'])}"
        for x in (o, *others)
        if x["comm_stretch"] is not None
    ]
    lo, hi = min(shares.values()), max(shares.values())
    reach = {}
    for x in (o, *others):
        t = reachable_step_s(records, x["mode"], x["k"])
        if t is not None and x["serial_s"] > t:
            reach[x["mode"]] = (x["serial_s"] - x["overlapped_s"]) / (x["serial_s"] - t)
    reach_text = (
        f"; against the step k = {o['k']} can reach with this run's own compute and calls (T({o['k']}) = "
        f"c + {o['k'] - 1}·max(c, m) + m, section 3's formula), "
        + ", ".join(f"{m} {x:.0%}" for m, x in reach.items())
        if reach
        else ""
    )
    magnitude = Claim(
        "A3",
        "… on an accelerator the step comes near max(compute, comm) (how much overlap recovers)",
        "the recovered share, (serial − overlapped) ÷ (serial − bound), at the two ends of this machine: "
        "the ideal engine and real compute on the cores gloo's threads need; an accelerator's "
        "collectives take a few SMs and some memory bandwidth, a point between that this box cannot "
        "place: inconclusive on this machine, the two ends its bracket",
        "inconclusive on this machine",
        f"recovered {lo:.0%}–{hi:.0%} of the possible saving ("
        + ", ".join(f"{m} {x:.0%}" for m, x in shares.items())
        + f", against max(compute, comm){reach_text}); "
        + "; ".join(_line(x) for x in others)
        + (
            "; the all-reduces in flight inside the overlapped step take, over their time alone, "
            + ", ".join(stretch)
            + " (measured): real compute slows the communication it overlaps"
            if stretch
            else ""
        ),
        basis=verdicts.TOY,
    )
    return [mechanism, magnitude]
