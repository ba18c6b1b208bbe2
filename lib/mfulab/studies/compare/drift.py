"""How far a study's numbers moved between fresh runs of one machine (its ``stability.json``),
and whether machines differ by more than that."""

from __future__ import annotations

import math
from pathlib import Path

from mfulab import results

MISSING = "missing"  # the machine has no results of this study
NOT_APPLICABLE = "n/a"  # the study ran and wrote null (e.g. no peak for a CPU run in bf16)


def _stability_reports(results_root, study: str, names) -> dict:
    """``{machine: report}`` of the machines that left a stability run of ``study`` (its
    ``stability.json``), in ``names``' order."""
    reports = {m: results.load_stability(Path(results_root) / m / study) for m in names}
    return {m: r for m, r in reports.items() if r}


def stability_drift(results_root, study: str, names) -> dict:
    """``{machine: {key: drift}}`` from ``<machine>/<study>/stability.json`` where a stability
    run left one: (max − min) ÷ |median| of each headline number over fresh runs."""
    found = {}
    for machine, report in _stability_reports(results_root, study, names).items():
        drift = {k: v["drift"] for k, v in report.get("drift", {}).items() if v.get("drift") is not None}
        if drift:
            found[machine] = drift
    return found


def declared_drift(results_root, study: str, names, params_by_key: dict) -> dict:
    """``{machine: {key: drift}}``: the drift a study's own parameter declares for a number
    (``params_by_key``: metric key → the study's parameter, ``Metric.drift_param``), as each
    machine's run of it set that parameter (its ``env.json``). A study that widens a ratio's
    interval by more than the course's 5%, because fresh runs moved it that much, holds a
    difference between machines to the same width."""
    import json

    found = {}
    for machine in names:
        env = Path(results_root) / machine / study / results.ENV
        if not env.exists() or not params_by_key:
            continue
        params = json.loads(env.read_text()).get("params") or {}
        drift = {k: float(params[p]) for k, p in params_by_key.items() if params.get(p) is not None}
        if drift:
            found[machine] = drift
    return found


def stability_flips(results_root, study: str, names) -> dict:
    """``{machine: [claim label, ...]}``: the claims rows whose verdict flipped between the fresh
    runs of that machine's stability run (``stability.json`` ``flips``), where it left one."""
    reports = _stability_reports(results_root, study, names)
    return {m: list(r["flips"]) for m, r in reports.items() if r.get("flips")}


def stability_sizes(results_root, study: str, names) -> dict:
    """``{machine: fresh runs}`` of each machine's stability run of ``study`` (its ``runs``)."""
    reports = _stability_reports(results_root, study, names)
    return {m: int(r["runs"]) for m, r in reports.items() if r.get("runs")}


def stability_runs(results_root, study: str, names) -> list[str]:
    """The machines that left a stability run of ``study`` (its ``stability.json``): only there
    is it known whether a verdict flips between fresh runs."""
    return list(_stability_reports(results_root, study, names))


def across_drift(values, drift: float) -> str:
    """Whether the machines' numbers of one key differ by more than the drift between fresh runs
    (the widest any machine's stability run saw for that key, at least the assumed run-to-run
    drift): their spread (max − min) ÷ |median|, as the stability report measures drift. Empty
    where fewer than two machines have a number."""
    import numpy as np

    numbers = [
        float(v) for v in values if v not in (MISSING, NOT_APPLICABLE) and not isinstance(v, bool | str)
    ]
    if len(numbers) < 2:
        return ""
    if max(numbers) == min(numbers):
        return "the same"
    median = float(np.median(numbers))
    if not median:  # a spread relative to zero means nothing: the numbers differ, by how much is absolute
        return f"differs (around 0: {min(numbers):.3g} to {max(numbers):.3g})"
    spread = (max(numbers) - min(numbers)) / abs(median)
    # whole percents, unless they would print a spread and a drift that read equal ("5% > 5%")
    fmt = ".1%" if f"{spread:.0%}" == f"{drift:.0%}" else ".0%"
    if spread <= drift:
        return f"within drift ({spread:{fmt}} ≤ {drift:{fmt}})"
    return f"differs ({spread:{fmt}} > {drift:{fmt}})"


def _numbers(values) -> list[float]:
    return [float(v) for v in values if v not in (MISSING, NOT_APPLICABLE) and not isinstance(v, bool | str)]


def across_points(values, drift: float, resolution: float, spreads=None, generic: float | None = None) -> str:
    """Whether shares (or signed errors) of several machines differ: their difference in
    percentage points against the widest spread between fresh runs any machine saw, in points
    (``spreads``: each machine's relative drift × its own |value|, the absolute max − min its
    stability run measured; round thirty-one's reader of chapter 11: a relative drift of a value
    near zero, scaled to another machine's larger value, gave a tolerance of tens of points),
    else ``drift`` × max |value|; at least ``resolution`` (the course's presence floor, 1 point:
    a share below it is no loss, so two below it are not told apart). A relative spread would
    call 0.3% against 0.4% a 22% difference. With ``generic`` (the course's run-to-run drift), a
    tolerance wider than that drift's names the generic one too. Empty where fewer than two
    machines have a number."""
    numbers = _numbers(values)
    if len(numbers) < 2:
        return ""
    if max(numbers) == min(numbers):
        return "the same"
    diff_pts = 100 * (max(numbers) - min(numbers))
    widest = max(spreads) if spreads else drift * max(abs(v) for v in numbers)
    tolerance_pts = 100 * max(widest, resolution)
    plain_pts = 100 * max(generic * max(abs(v) for v in numbers), resolution) if generic else tolerance_pts
    at_generic = f"; {plain_pts:.1f} pt at the generic {generic:.0%}" if plain_pts < tolerance_pts else ""
    if diff_pts <= tolerance_pts:
        return f"within drift ({diff_pts:.1f} pt ≤ {tolerance_pts:.1f} pt{at_generic})"
    return f"differs ({diff_pts:.1f} pt > {tolerance_pts:.1f} pt)"


def across_intervals(intervals: list[tuple[float, float]]) -> str:
    """Whether machines' effects differ by their own intervals (``(low, high)`` each, the study's
    interval over its rounds, already widened for drift by its rule): they differ only where two
    intervals do not overlap, as the course compares a ratio with a line (point values inside
    overlapping intervals are not told apart)."""
    if len(intervals) < 2:
        return ""
    highest_low = max(lo for lo, _ in intervals)
    lowest_high = min(hi for _, hi in intervals)
    if highest_low <= lowest_high:
        return f"within intervals (they overlap on [{highest_low:.3g}, {lowest_high:.3g}])"
    return f"differs (intervals apart: {lowest_high:.3g} < {highest_low:.3g})"


def across_exact(values) -> str:
    """A number that did not move at all between fresh runs of any machine (a formula such as an
    ISA peak, a count, a datasheet figure): no drift to test it against, so two machines' values
    differ exactly where they are not equal."""
    numbers = _numbers(values)
    if len(numbers) < 2:
        return ""
    # equal up to floating-point round-off (a fitted slope of 2 reads 2.000000000000002 on one machine)
    same = math.isclose(max(numbers), min(numbers), rel_tol=1e-9, abs_tol=1e-12)
    return "the same" if same else "differs (exact: no drift between fresh runs)"


def highest_over_lowest(values: dict) -> str:
    """``{machine: value}`` as the highest value over the lowest, with the machine that has the
    highest (``"1.98× (cpu-2c)"``): what a reader asks of two machines' numbers. Empty where fewer
    than two machines have a positive number."""
    numbers = {
        m: float(v)
        for m, v in values.items()
        if v not in (MISSING, NOT_APPLICABLE) and not isinstance(v, bool | str) and float(v) > 0
    }
    if len(numbers) < 2 or max(numbers.values()) == min(numbers.values()):
        return ""  # equal values have no highest machine
    top = max(numbers, key=numbers.get)
    return f"{numbers[top] / min(numbers.values()):.2f}× ({top})"


# the calibration's own figures that studies copy into their metrics (the key there ← the
# calibration's stability entry): their drift between fresh runs is the calibration's, since every
# fresh run of a study reads the one committed calibration (a study's own stability sees 0). The
# matmul ceiling takes the widest of the calibration's matmul dtypes (fp32 on a CPU, bf16 on a GPU:
# the wider is the cautious one)
CALIBRATION_KEYS = {
    "matmul_ceiling_flops_per_s": ("matmul:fp32 best_flops_per_s", "matmul:bf16 best_flops_per_s"),
    # chapter 01's ceiling over its peak: the ceiling's drift (the peak is a formula)
    "ceiling_over_datasheet": ("matmul:fp32 best_flops_per_s", "matmul:bf16 best_flops_per_s"),
    "memory_bandwidth_bytes_per_s": ("bandwidth plateau_bytes_per_s",),
    "link_bytes_per_s": ("collectives:gloox2 link_bytes_per_s", "collectives:nccl link_bytes_per_s"),
    "alpha_s": ("collectives:gloox2 alpha_s", "collectives:nccl alpha_s"),
}


def calibration_drift(results_root, names) -> dict:
    """``{machine: {key: drift}}`` for the calibration's figures (:data:`CALIBRATION_KEYS`), from
    ``<machine>/calibration/stability.json`` where ``make stability STUDY=calibration`` left one."""
    found = {}
    for machine in names:
        report = results.load_stability(Path(results_root) / machine / "calibration") or {}
        entries = report.get("drift", {})
        drift = {
            key: max(entries[e]["drift"] for e in sources if entries.get(e, {}).get("drift") is not None)
            for key, sources in CALIBRATION_KEYS.items()
            if any(entries.get(e, {}).get("drift") is not None for e in sources)
        }
        if drift:
            found[machine] = drift
    return found


def across_cell(values, unit: str, drift: float, exact: bool, interval=None, spreads=None) -> str:
    """How a row's machines compare, by what the number is: a number that never moved between fresh
    runs is compared exactly (:func:`across_exact`); one with an interval over its rounds by the
    intervals (:func:`across_intervals`); a share or a signed error in points, against the presence
    floor (:func:`across_points`); anything else by its relative spread (:func:`across_drift`)."""
    from mfulab.studykit.verdicts import B2_PRESENT_SHARE

    if interval:
        return across_intervals(interval)
    if exact:
        return across_exact(values)
    if unit == "fraction":
        from mfulab.measure.timing import RUN_TO_RUN_DRIFT

        return across_points(values, drift, B2_PRESENT_SHARE, spreads, generic=RUN_TO_RUN_DRIFT)
    return across_drift(values, drift)


def plain_drift_note(shown, drift: float) -> str:
    """How much of "within drift" rests on a widened drift: the rows of ``shown``
    (``analysis.formatted``'s table, its ``across machines`` column) read within a drift wider than
    the course's generic ``drift`` (a study's declared or measured one) whose spread between machines
    passes ``drift``: at the generic drift they would read *differs*. Empty with one machine or
    where none does."""
    import re

    if "across machines" not in shown:
        return ""
    pattern = re.compile(r"within drift \((\d+(?:\.\d+)?)% ≤ (\d+(?:\.\d+)?)%\)")
    # a share in points names the generic drift's tolerance where its own is wider (across_points)
    points = re.compile(r"within drift \((\d+(?:\.\d+)?) pt ≤ (\d+(?:\.\d+)?) pt(?:; (\d+(?:\.\d+)?) pt at)?")
    widened = []
    for metric, cell in zip(shown["metric"], shown["across machines"]):
        found, pts = pattern.search(str(cell)), points.search(str(cell))
        if found and float(found.group(2)) / 100 > drift and float(found.group(1)) / 100 > drift:
            widened.append(f"{metric} ({found.group(1)}% against {found.group(2)}%)")
        elif pts and pts.group(3) and float(pts.group(1)) > float(pts.group(3)):
            widened.append(
                f"{metric} ({pts.group(1)} pt against {pts.group(2)} pt; {pts.group(3)} pt at {drift:.0%})"
            )
    total = sum(bool(pattern.search(str(c)) or points.search(str(c))) for c in shown["across machines"])
    if not widened:
        return (
            f"**At the generic {drift:.0%} drift** no row that reads within drift would differ ({total} "
            "rows read within drift)."
        )
    return (
        f"**At the generic {drift:.0%} drift** {len(widened)} of the {total} rows that read within drift "
        "would differ, each resting on a drift its study measured or declared wider: "
        + "; ".join(widened)
        + ". A verdict's flips between fresh runs are counted under the profile's own settings only "
        "(the stability runs did not try the generic drift)."
    )
