"""The comparison's figure of matmul ceilings against peaks, per machine (and per usable core where
the machines are one host on several core budgets), with its title."""

from __future__ import annotations

import math

from mfulab.studies.compare.drift import MISSING, NOT_APPLICABLE


def _values(rows, key, names) -> dict:
    """{machine: float} of one key, machines without a number left out."""
    if key not in rows.index:
        return {}
    return {n: float(rows.loc[key, n]) for n in names if rows.loc[key, n] not in (MISSING, NOT_APPLICABLE)}


def measured_ceilings(table) -> dict:
    """``{machine: (matmul ceiling, peak or None)}`` in FLOP/s, from the table's
    ``matmul_ceiling_flops_per_s`` and ``datasheet_peak_flops_per_s`` (a GPU's datasheet, a CPU's
    ISA peak); a machine without a ceiling is left out."""
    names = [c for c in table.columns if c not in ("study", "metric", "unit", "key")]
    rows = table.drop_duplicates("key").set_index("key")
    peaks = _values(rows, "datasheet_peak_flops_per_s", names)
    return {n: (c, peaks.get(n)) for n, c in _values(rows, "matmul_ceiling_flops_per_s", names).items()}


def ceilings_takeaway(table) -> str:
    """The figure's title: what the measured ceilings say, machine against machine (or, with
    one machine, against its peak: a GPU's datasheet, a CPU's ISA peak)."""
    from mfulab.units import si

    ceilings = measured_ceilings(table)
    measured = {n: c for n, (c, _) in ceilings.items()}
    shares = {n: c / peak for n, (c, peak) in ceilings.items() if peak}
    of_peak = (
        f"; {min(shares.values()):.0%}–{max(shares.values()):.0%} of the peak (datasheet or ISA)"
        if len(shares) > 1
        else "".join(f"; {n} reaches {v:.0%} of its peak (datasheet or ISA)" for n, v in shares.items())
    )
    if not measured:
        return "No machine has a measured matmul ceiling yet"
    if len(measured) == 1:
        ((name, value),) = measured.items()
        no_peak = "" if shares else " (no peak to compare with)"
        return (
            f"One machine only, nothing to compare:\n{name} measures {si(value, 'FLOP/s')}{no_peak}{of_peak}"
        )
    fast, slow = max(measured, key=measured.get), min(measured, key=measured.get)
    ratio = measured[fast] / measured[slow]
    shown = f"{ratio:,.0f}" if ratio >= 1000 else f"{ratio:.3g}"
    return f"{fast}'s matmul ceiling is {shown}× {slow}'s{of_peak}"


def plot_ceilings(table, records=None):
    """Measured matmul ceiling next to the peak, per machine (TFLOP/s, log scale where machines span
    decades): a GPU's dense datasheet peak, a CPU's fp32 peak from its ISA (mfu's ``cpu_isa_peak``),
    as point markers: on a log axis a bar's length depends on where the axis starts, a marker's
    height does not. With ``records``, the ceiling carries a whisker of its calibration's drift
    between fresh runs (± half of (max − min) ÷ median), and, where the machines are one host on
    different core budgets, a second panel gives both per usable core. A machine without a peak
    says so."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    names = [c for c in table.columns if c not in ("study", "metric", "unit", "key")]
    rows = table.drop_duplicates("key").set_index("key")  # the first study that declares the key
    series = (
        ("matmul_ceiling_flops_per_s", "measured matmul ceiling (fp32 on a CPU, square GEMMs)", "C0", "o"),
        ("datasheet_peak_flops_per_s", "peak: datasheet (GPU) or ISA (CPU)", "C1", "D"),
    )
    drift = ((records or {}).get("drift") or {}).get("calibration") or {}
    hosts_of = (records or {}).get("hosts") or {}
    per_core = len({h.get("device_name") for h in hosts_of.values()}) == 1 and all(
        hosts_of.get(n, {}).get("cpu_count") for n in names
    )
    offset = 0.15
    fig, axes = plt.subplots(
        1, 2 if per_core else 1, figsize=(max(5.0, 1.6 * len(names) + 2.5) * (1.8 if per_core else 1), 3.8)
    )
    axes = list(axes) if per_core else [axes]
    panels = [(axes[0], 1e12, "TFLOP/s", lambda n: 1.0)]
    if per_core:
        panels.append((axes[1], 1e9, "GFLOP/s per usable core", lambda n: hosts_of[n]["cpu_count"]))
    for ax, scale, unit, divisor in panels:
        numeric = [
            float(rows.loc[key, n]) / scale / divisor(n)
            for key, *_ in series
            for n in names
            if rows.loc[key, n] not in (MISSING, NOT_APPLICABLE)
        ]
        low = 10 ** math.floor(math.log10(min(numeric) / 2)) if numeric else 0.01  # a labelled decade
        high = 10 ** math.ceil(math.log10(max(numeric) * 2)) if numeric else 1.0
        linear = bool(numeric) and max(numeric) / min(numeric) < 20  # one kind of machine
        for i, (key, label, colour, marker) in enumerate(series):
            drawn = False
            for j, machine in enumerate(names):
                value = rows.loc[key, machine]
                x = j + (i - 0.5) * 2 * offset
                if value in (MISSING, NOT_APPLICABLE):
                    why = "no peak" if value == NOT_APPLICABLE else "not run"
                    ax.text(
                        x,
                        0 if linear else low * 1.15,
                        why,
                        ha="center",
                        va="bottom",
                        fontsize=7,
                        color="0.35",
                    )
                    continue
                y = float(value) / scale / divisor(machine)
                spread = drift.get(machine, {}).get(key, 0.0) * y / 2
                ax.errorbar(
                    x,
                    y,
                    yerr=spread or None,
                    fmt=marker,
                    color=colour,
                    markersize=8,
                    capsize=3,
                    label=None if drawn else label,
                )
                ax.annotate(
                    f"{y:.3g}", (x, y), xytext=(7, 0), textcoords="offset points", va="center", fontsize=7
                )
                drawn = True
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names)
        ax.set_xlim(-0.7, len(names) - 0.3)
        ax.grid(axis="x", visible=False)
        if linear:  # a linear axis from 0 reads best
            ax.set_ylim(0, max(numeric) * 1.25)
            ax.set_ylabel(unit)
        else:  # a CPU beside a GPU spans decades
            ax.set_yscale("log")
            ax.set_ylim(low, high)
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.set_ylabel(f"{unit} (log scale)")
    if drift:
        axes[0].set_xlabel("whisker: the calibration's drift between fresh runs", fontsize=7)
    fig.suptitle(ceilings_takeaway(table), fontsize=10)
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig
