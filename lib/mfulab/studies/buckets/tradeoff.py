"""A6's trade-off, the chapter's title, measured in the toy: article A §2.3, "如果桶太大，必须等所有
梯度都就绪才能开始通信，重叠效果变差；如果桶太小，通信次数太多" (too large a bucket must wait for all
its gradients before it communicates, and overlaps worse; too small, and the calls are too many).

Each side is measured where this machine can show it, both timed against the fastest cap of the
same interleaved rounds (``analysis.both_sides``): too many calls in the real sweep (200 small
tensors whose calls are latency-bound: one bucket per tensor against the fastest cap), a late
start in the emulated sweep, whose stack is sized for it (``params``: 16 layers of 1024 × 1024,
64 MiB of fp32 gradients whose one all-reduce takes about 50 ms here, under a backward that sleeps
8 ms a layer so gloo has free cores to overlap with: one bucket, whose all-reduce starts when the
backward ends, against the fastest cap). On two cores the real backward leaves gloo no core to
overlap with, and the emulated one hides even per-tensor calls, so neither sweep alone shows
both sides."""

from __future__ import annotations

from mfulab.studies.buckets.analysis import both_sides, one_shot_s
from mfulab.studies.buckets.params import stack_dims
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim

MODE = "emulated"


def tradeoff_verdict(calls, late) -> str:
    """*shown* when both sides (each a ``Comparison`` against the fastest cap, None where the side's cap
    is itself the fastest) are slower than the fastest cap beyond the drift-widened interval
    (``ratio_lo`` > 1); *not shown* where a side's cap is itself the fastest (the mechanism did not
    appear); *inconclusive on this machine* otherwise."""
    if calls is None or late is None:
        return "not shown"
    return "shown" if calls.ratio_lo > 1.0 and late.ratio_lo > 1.0 else "inconclusive on this machine"


def tradeoff_claim(records) -> list[Claim]:
    """The row, where the run has both sweeps with three caps or more each."""
    if set(records["params"].get("modes", ())) != {"real", "emulated"}:
        return []
    real, emulated = both_sides(records, "real"), both_sides(records, MODE)
    if real is None or emulated is None:
        return []
    calls, late = real["too_many_calls"], emulated["late_start"]
    layers, hidden, batch = stack_dims(records["params"], MODE)
    sleep_ms = records["params"]["emulated_layer_backward_s"] * 1e3

    def drift(c) -> str:
        return f"{c.run_to_run_drift:.0%}" if c is not None else "none"

    def side(c, cap: float, best: float) -> str:
        if c is None:
            return f"{cap:g} MiB is itself the fastest cap"
        return (
            f"{cap:g} MiB takes {c.ratio:.2f}× [{c.ratio_lo:.2f}, {c.ratio_hi:.2f}] the step of the fastest "
            f"cap ({best:g} MiB)"
        )

    return [
        Claim(
            "A6",
            "too large a bucket waits for all its gradients and overlaps worse; too small a bucket makes "
            "too many calls",
            "each side where this machine shows it, against the fastest cap of the same interleaved "
            "rounds, 2 ranks: too many calls in the real sweep (one bucket per tensor); a late start in the "
            f"emulated sweep ({layers} layers of {hidden} × {hidden}, {batch} rows, {sleep_ms:g} ms of "
            "sleep per layer's backward: one bucket)",
            tradeoff_verdict(calls, late),
            f"too many calls: {side(calls, real['smallest'], real['best'])}; a late start: "
            f"{side(late, emulated['largest'], emulated['best'])} (intervals widened by the drift between "
            f"fresh runs: {drift(calls)} measured for the per-tensor ratio, {drift(late)} assumed for the "
            "late start); one all-reduce of the emulated stack's gradients takes "
            f"{one_shot_s(records, MODE) * 1e3:.0f} ms at the calibration's α–β, the most a late start can "
            "add; in the emulated sweep one bucket per tensor takes "
            + (
                f"{emulated['too_many_calls'].ratio:.2f}× the fastest cap (its calls hide under the sleeping "
                "backward)"
                if emulated["too_many_calls"] is not None
                else "the fastest step"
            ),
            basis=verdicts.TOY,
        )
    ]
