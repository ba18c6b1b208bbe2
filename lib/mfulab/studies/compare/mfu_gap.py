"""Why one machine shows two MFUs: chapter 01 times one process, its step on every core and
nothing else; chapter 07's job runs two DDP ranks on the same cores (one thread each), and its
step also waits for the all-reduce, the loader and the checkpoint. Both count the same FLOPs
(palm convention) against the same measured ceiling, so the gap is the job's, not the machine's.

The gap is split in three steps, each measured by chapter 07 (its last rung's step, mean over
ranks, split by timestamps into useful compute, slow operators and the waits):

    one                    chapter 01's MFU (compute only, one process)
    one × (1 − waits)      the job's waits charged, its compute at chapter 01's rate
    e × (1 − waits)        its compute at the rate it ran at, e = useful / (useful + slow operators)
    job                    chapter 07's MFU (the slowest rank's median step, not the mean): the
                           residual is the slowest rank against the mean and the denominators' mismatch

The two middle steps can be taken in either order (compute first: one → e, then e → e × (1 −
waits)), and the points each takes depend on the order. The note reports the Shapley split, the
mean of the two orders (waits: one × waits in one order, e × waits in the other), with both
orders' figures beside it.
"""

from __future__ import annotations

from mfulab.studies.compare import hosts
from mfulab.studies.compare.figures import _values


def _pts(fraction: float) -> str:
    return f"{100 * fraction:.1f} points"


def mfu_gap_parts(one: float, job: float, wait_share: float, compute_efficiency: float) -> dict:
    """The gap ``one − job`` (fractions of the ceiling) in three parts that sum to it: the job's
    waits, its compute below chapter 01's rate, and the residual (the slowest rank against the mean,
    and the mismatch of the two steps' denominators). Waits and compute are the Shapley split, the
    mean over the two orders of charging them; ``waits_first`` and ``waits_last`` are the waits'
    points in each order."""
    waits_first = one * wait_share  # one → one × (1 − w)
    waits_last = compute_efficiency * wait_share  # e → e × (1 − w)
    both = one - compute_efficiency * (1.0 - wait_share)  # waits and slower compute together
    waits = (waits_first + waits_last) / 2
    return {
        "gap": one - job,
        "waits": waits,
        "slower compute": both - waits,
        "residual": compute_efficiency * (1.0 - wait_share) - job,
        "waits_first": waits_first,
        "waits_last": waits_last,
    }


def mfu_gap_note(table, records=None) -> str:
    """The note under the comparison table (see the module's docstring). Empty where a machine
    lacks either MFU; without chapter 07's split it gives the two numbers and their ratio; with
    ``records``, on a machine where chapter 07's job ran more ranks than usable cores
    (``hosts.oversubscribed``) the split is not made: the job's figures are an oversubscribed
    run's."""
    crowded = hosts.oversubscribed(records, "anatomy") if records else []
    names = [c for c in table.columns if c not in ("study", "metric", "unit", "key")]
    rows = table.drop_duplicates("key").set_index("key")
    # chapter 01's MFU over the calibration's ceiling, the one chapter 07 divides by (its headline
    # divides by the ceiling timed in its own process; older results have only that one)
    one = {
        **_values(rows, "steady_mfu_vs_ceiling", names),
        **_values(rows, "steady_mfu_vs_calibration", names),
    }
    job = _values(rows, "best_mfu", names)
    waits = _values(rows, "best_wait_share", names)
    eff = _values(rows, "best_compute_efficiency", names)
    ceiling_file = _values(rows, "matmul_ceiling_flops_per_s", names)
    ceiling_now = _values(rows, "ceiling_now_flops_per_s", names)
    notes = []
    for n in names:
        if n not in one or n not in job:
            continue
        note = (
            f"`{n}`: {one[n]:.1%} for one process (chapter 01) against {job[n]:.1%} for the two-rank "
            f"DDP job with every knob on (chapter 07), {job[n] / one[n]:.2f}× of it"
        )
        if n in crowded:
            note += (
                " (not split: chapter 07's job ran more ranks than usable cores here, so its waits and "
                "compute are an oversubscribed run's)"
            )
        elif n in waits and n in eff:
            parts = mfu_gap_parts(one[n], job[n], waits[n], eff[n])
            share = parts["waits"] / parts["gap"] if parts["gap"] > 0 else float("nan")
            gap, w, slower, rest = (_pts(parts[k]) for k in ("gap", "waits", "slower compute", "residual"))
            note += (
                f". Of the gap, {gap}, the job's waits (communication, data, checkpoint: {waits[n]:.1%} "
                f"of its step) take {w}, {share:.0%} of it ({100 * parts['waits_last']:.1f}–"
                f"{100 * parts['waits_first']:.1f} points by the order they are charged in; the split is "
                f"the mean of both); its compute, at {eff[n]:.1%} of the ranks' "
                f"share of the ceiling against chapter 01's {one[n]:.1%}, takes {slower}; the residual, "
                f"{rest}, is the slowest rank's step against the mean and the two steps' denominators "
                "(it can be negative only through the latter)"
            )
        if n in ceiling_file and n in ceiling_now:
            moved = ceiling_now[n] / ceiling_file[n] - 1
            note += (
                f" (the matmul ceiling re-timed right after chapter 07's job reads {moved:+.0%} from the "
                "calibration's that both MFUs divide by: the split is only as good as that agreement)"
            )
        notes.append(note)
    if not notes:
        return ""
    return (
        "**Two MFUs of one machine.** "
        + "; ".join(notes)
        + ". Both count the palm FLOPs against the machine's calibrated matmul ceiling: chapter 01's "
        "`steady_mfu_vs_calibration` (its headline, `steady_mfu_vs_ceiling`, divides by the ceiling "
        "timed in its own process since 2026-12-07; results from before then have only that key, "
        "which divided by the calibration too, so a machine's two rows in the table above can hold "
        "different denominators where its results ran at other code). Chapter 01's step is one "
        "process computing on every core; chapter 07's is a job of two ranks that share the cores, "
        "one thread each, each on fewer tokens per step than chapter 01's process (the two chapters' "
        "configurations), and its step also holds the waits chapter 07 splits out. Where compute "
        "below chapter 01's rate takes most of the gap, the gap is how the job computes (split "
        "cores, smaller matmuls), not what it waits for."
    )
