"""How far a study's numbers moved between fresh runs of one machine (its ``stability.json``),
and whether machines differ by more than that."""

from __future__ import annotations

from pathlib import Path

from mfulab import results

MISSING = "missing"  # the machine has no results of this study
NOT_APPLICABLE = "n/a"  # the study ran and wrote null (e.g. no peak for a CPU run in bf16)


def stability_drift(results_root, study: str, names) -> dict:
    """``{machine: {key: drift}}`` from ``<machine>/<study>/stability.json`` where a stability
    run left one: (max − min) ÷ |median| of each headline number over fresh runs."""

    found = {}
    for machine in names:
        report = results.load_stability(Path(results_root) / machine / study) or {}
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
    found = {}
    for machine in names:
        report = results.load_stability(Path(results_root) / machine / study) or {}
        if report.get("flips"):
            found[machine] = list(report["flips"])
    return found


def stability_runs(results_root, study: str, names) -> list[str]:
    """The machines that left a stability run of ``study`` (its ``stability.json``): only there
    is it known whether a verdict flips between fresh runs."""
    return [m for m in names if results.load_stability(Path(results_root) / m / study)]


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
