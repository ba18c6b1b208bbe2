"""The sentences of notebook 05 that carry numbers, computed from the records (so that no
text can disagree with the tables beside it)."""

from __future__ import annotations

from ...verdicts import summary_line
from .analysis import a6_measured, a6_regime, sweet_spot_text
from .flags import B6_SEVERAL_PERCENT_RATIO, confirmable_bound
from .sensitivity import TIE_TOLERANCE
from .sensitivity import summary as sensitivity_summary
from .simulator import DEFAULT_BUCKET_CAP_MB
from .stated import A6_MFU_POINTS, SENSITIVITY, STATED_INTERCONNECT


def sweep_notes(records, sweep) -> str:
    """The all-reduce fit, A6's regime here, and per mode: the per-tensor cost and the
    late-start cost (one bucket vs the best cap)."""
    fit = records["ddp"]["allreduce_fit"]
    regime = a6_regime(records)
    lines = [
        f"* All-reduce on this machine (calibration): α = {fit['alpha_s'] * 1e6:.0f} µs per ring step, "
        f"B = {fit['link_bytes_per_s'] / 1e9:.2f} GB/s. One call's set-up latency is "
        f"{regime['latency_s'] * 1e6:.0f} µs against {regime['transfer_s'] * 1e6:.0f} µs of transfer for the "
        f"average tensor ({regime['ratio']:.1f}:1, {regime['tensors']} tensors)."
    ]
    for label, d in sweep[sweep.variant == "default"].groupby("compute"):
        d = d.set_index("bucket_cap_mb").sort_index()
        best = d.step_s.idxmin()
        first, last = d.iloc[0], d.iloc[-1]
        lines.append(
            f"* {label}: best cap {best:g} MiB ({d.step_s[best] * 1e3:.1f} ms); one bucket per tensor "
            f"({d.index[0]:g} MiB, {first.buckets} buckets) {first.step_s * 1e3:.1f} ms; the largest cap "
            f"({d.index[-1]:g} MiB, {last.buckets} bucket(s)) {last.step_s * 1e3:.1f} ms — its late "
            "start costs "
            f"{(last.step_s - d.step_s[best]) * 1e3:+.1f} ms over the best. Simulator residuals "
            f"{d.residual.min():+.0%} to {d.residual.max():+.0%}."
        )
    return "\n".join(lines)


def flag_notes(records, table) -> str:
    """The bound each flag is held to, and what this machine can resolve."""
    if table.empty:
        return "*No flag variants in this run.*"
    from ...timing import RUN_TO_RUN_DRIFT

    bw = records["bandwidth"]["plateau_bytes_per_s"]
    r = table.iloc[0]
    need = confirmable_bound(RUN_TO_RUN_DRIFT)
    return (
        f"* Gradients: {records['params']['stack_layers'] * 2} tensors, DRAM bandwidth "
        f"{bw / 1e9:.1f} GB/s (calibration); the avoided copy takes at most "
        f"{table.copy_avoided_bound_s.max() * 1e3:.2f} ms of a {r.default_step_s * 1e3:.1f} ms step.\n"
        f'* Claimed: ≥ {B6_SEVERAL_PERCENT_RATIO:g}× ("several percent"). With ±{RUN_TO_RUN_DRIFT:.0%} '
        f"run-to-run drift on each side an interval is at least {(1 + RUN_TO_RUN_DRIFT) ** 2:.3f}× wide, so "
        f"only a mechanism allowing ≥ {need:.3f}× could be confirmed; the largest bound here is "
        f"{table.mechanism_bound.max():.3f}×."
    )


def scale_notes(best) -> str:
    """Where the simulated best cap stands against the article's 20–40 MB and 5–8 points."""
    n = int(best.world_size.max())
    big = best[best.world_size == n]
    gains = big.gain_vs_25 * 100
    return (
        f"At {n} ranks {sweet_spot_text(big)}. The best cap beats {DEFAULT_BUCKET_CAP_MB} MiB by "
        f"{gains.min():.1f}–{gains.max():.1f} MFU points (the article: {A6_MFU_POINTS[0]:g}–"
        f"{A6_MFU_POINTS[1]:g} points from the bucket size)."
    )


def sensitivity_notes(sens) -> str:
    s = sensitivity_summary(sens)
    a6 = ", ".join(s["a6_changed"]) or "none"
    b8 = ", ".join(s["b8_changed"]) or "none"
    return (
        f"* Ties: caps within {TIE_TOLERANCE:.1%} of the fastest simulated step. Latency per step "
        f"from {min(SENSITIVITY['alpha_s']) * 1e6:g} µs to the stated "
        f"{STATED_INTERCONNECT['alpha_s'] * 1e6:g} µs.\n"
        f"* A6 (does the best cap lie outside 20–40 MB?): same answer in {s['a6_same']} of "
        f"{s['scenarios']} scenarios; changed under: {a6} — *best*: a model's only best cap lies in "
        "20–40 MB; *tied*: 20–40 MB ties with the best (the all-reduce hides behind the backward pass "
        "and the cap barely matters).\n"
        f"* B8 (does 50–100 MiB beat 25 MiB for 7B on 64 cards?): same answer in {s['b8_same']} of "
        f"{s['scenarios']}; changed under: {b8}."
    )


def summary(records, sweep, claim_list) -> str:
    """The closing bullets."""
    lines = []
    m = a6_measured(records)
    if m:
        c = m["per_tensor"]
        lines.append(
            f"* One bucket per tensor ({m['buckets']} all-reduces per step) made the step "
            f"{c.ratio:.1f}× [{c.ratio_lo:.1f}, {c.ratio_hi:.1f}] slower than the best cap "
            f"({m['best']:g} MiB), real compute."
        )
    lines.append(
        "* DDP's bucket layouts match the formation rules exactly; gradients equal the single-process "
        "reference."
    )
    lines.append(summary_line(claim_list))
    return "\n".join(lines)
