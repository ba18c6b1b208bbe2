"""The sentences of notebook 05 that carry numbers, computed from the records (so that no
text can disagree with the tables beside it)."""

from __future__ import annotations

from mfulab.analytic import comm, rates
from mfulab.analytic import step as step_model
from mfulab.analytic.config import preset
from mfulab.studies.buckets.analysis import a6_regime, both_sides, caps_text, one_shot_s, tied_fastest_caps
from mfulab.studies.buckets.cluster_scale import spread_text, sweet_spot_text
from mfulab.studies.buckets.flags import (
    B6_SEVERAL_PERCENT_RATIO,
    bitmap_allreduce_s,
    gradient_bytes,
    search_cost,
)
from mfulab.studies.buckets.model_error import fit_table
from mfulab.studies.buckets.sensitivity import (
    FITTED,
    TIE_TOLERANCE,
    algorithm_text,
    by_size,
    plausible_caps_text,
    sensitivity_table,
    stated_accumulation,
    stated_tp,
)
from mfulab.studies.buckets.sensitivity import summary as sensitivity_summary
from mfulab.studies.buckets.simulator import DEFAULT_BUCKET_CAP_MB
from mfulab.studies.buckets.stated import (
    A6_GLOBAL_BATCH_SEQUENCES,
    A6_GLOBAL_BATCH_SOURCE,
    A6_MFU_POINTS,
    B8_STATED,
    SCALE_GRAD_BYTES_PER_ELEM,
    SENSITIVITY,
)
from mfulab.studykit import verdicts
from mfulab.studykit.step_error import SWITCH_MARGIN
from mfulab.studykit.verdicts import summary_line
from mfulab.units import GB, MB


def sweep_notes(records, sweep) -> str:
    """The all-reduce fit, A6's regime here, and per mode: the fastest cap (or the caps tied
    with it), one bucket per tensor, one bucket for everything, and the simulator's residuals
    with and without the fitted overheads."""
    fit = records["ddp"]["allreduce_fit"]
    regime = a6_regime(records)
    lines = [
        f"* All-reduce on this machine (calibration): α = {fit['alpha_s'] * 1e6:.0f} µs per ring step, "
        f"B = {fit['link_bytes_per_s'] / GB:.2f} GB/s. One call's set-up latency is "
        f"{regime['latency_s'] * 1e6:.0f} µs against {regime['transfer_s'] * 1e6:.0f} µs of transfer for the "
        f"average tensor ({regime['ratio']:.1f}:1, {regime['tensors']} tensors). One all-reduce of all "
        f"the gradients takes {regime['one_shot_s'] * 1e3:.2f} ms."
    ]
    default = sweep[sweep.variant == "default"]
    for mode in dict.fromkeys(default["mode"]):
        d = default[default["mode"] == mode].set_index("bucket_cap_mb").sort_index()
        label = d.compute.iloc[0]
        tied = tied_fastest_caps(records, mode)
        first, last = d.iloc[0], d.iloc[-1]
        steps_ms = ", ".join(f"{d.step_s[c] * 1e3:.1f}" for c in tied)
        fastest = (
            f"fastest cap {tied[0]:g} MiB ({steps_ms} ms)"
            if len(tied) == 1
            else f"the caps {caps_text(tied)} tie for the fastest ({steps_ms} ms: the ratio of each to the "
            "fastest median has an interval that reaches 1.0), so none of them is *the* best cap"
        )
        lines.append(
            f"* {label}: {fastest}; one bucket per tensor ({d.index[0]:g} MiB, {first.buckets} buckets) "
            f"{first.step_s * 1e3:.1f} ms; one bucket for everything ({d.index[-1]:g} MiB, {last.buckets} "
            f"bucket(s), its all-reduce starts after the backward) {last.step_s * 1e3:.1f} ms. Simulator "
            f"residuals (measured / simulated − 1): {d.residual.min():+.0%} to {d.residual.max():+.0%} with "
            f"the calibration's α–β alone, {d.residual_fitted.min():+.0%} to {d.residual_fitted.max():+.0%} "
            "with the fitted overheads."
        )
        sides = both_sides(records, mode)
        if sides:
            parts = []
            for side, what in (("too_many_calls", "too many calls"), ("late_start", "a late start")):
                c = sides[side]
                cap = sides["smallest" if side == "too_many_calls" else "largest"]
                if c is None:
                    parts.append(f"{what}: {cap:g} MiB is itself the fastest")
                else:
                    seen = "measured" if sides[f"{side}_measured"] else "not separated from the fastest"
                    parts.append(
                        f"{what}: {cap:g} MiB takes {c.ratio:.2f}× [{c.ratio_lo:.2f}, {c.ratio_hi:.2f}] the "
                        f"fastest cap's step ({seen})"
                    )
            no_comm_s, late_s = float(d.no_sync_s.iloc[0]), one_shot_s(records, mode)
            lines.append(
                f"  Both sides of the trade-off, {label}: "
                + "; ".join(parts)
                + f". Its step without communication (no_sync) takes {no_comm_s * 1e3:.1f} ms and one "
                f"all-reduce of its gradients {late_s * 1e3:.1f} ms at the calibration's α–β, so a late "
                f"start adds at most about {late_s / no_comm_s:.0%} of that step, if nothing else is exposed."
            )
    return "\n".join(lines)


def model_error_notes(records, fit_table, sweep=None) -> str:
    """What the fitted overheads are, how they compare with the calibration's per-call latency,
    what the sign of the α–β residuals says (``sweep``: :func:`analysis.sweep_table`), and where
    the overheads go."""
    if fit_table.empty:
        return "*Too few caps to fit the simulator's error.*"
    fit = records["ddp"]["allreduce_fit"]
    lines = [
        f"* {r.mode} compute: {r.per_bucket_overhead_s * 1e6:.0f} µs per bucket on the backward's path and "
        f"{r.per_step_overhead_s * 1e3:.1f} ms per synchronised step; the simulator's RMS error over the "
        f"{r.caps} caps falls from {r.rms_error_alpha_beta:.0%} to {r.rms_error_fitted:.0%} in sample"
        + (
            f", and is {r.rms_error_held_out:.0%} on each cap predicted by a fit to the others (leave one "
            "cap out: the validation)"
            + (
                f", no better than the calibration's α–β alone ({r.rms_error_alpha_beta:.0%}): on this run "
                "the fitted overheads do not carry to a cap they were not fitted on, and the sensitivity "
                "rows that carry them to scale are a what-if, not a correction"
                if r.rms_error_held_out >= r.rms_error_alpha_beta
                else ""
            )
            if r.rms_error_held_out == r.rms_error_held_out and r.rms_error_held_out is not None
            else ""
        )
        + "."
        for r in fit_table.itertuples()
    ]
    o = fit_table.per_bucket_overhead_s.max()
    per_call_s = 2 * (records["ddp"]["world_size"] - 1) * fit["alpha_s"]
    side = "below" if o < per_call_s else "above"
    lines.append(
        f"* Size: the larger fit, {o * 1e6:.0f} µs per bucket, is {side} the calibration's own latency of "
        f"one all-reduce call, 2(n − 1)·α = {per_call_s * 1e6:.0f} µs."
    )
    if sweep is not None and len(sweep):
        default = sweep[sweep.variant == "default"]
        for mode in dict.fromkeys(default["mode"]):
            d = default[default["mode"] == mode].sort_values("bucket_cap_mb")
            neg, pos = d[d.residual < 0], d[d.residual > 0]
            if len(neg) and len(pos) and neg.bucket_cap_mb.max() < pos.bucket_cap_mb.min():
                lines.append(
                    f"* Sign, {d.compute.iloc[0]}: the α–β residual is {neg.residual.min():+.0%} to "
                    f"{neg.residual.max():+.0%} at caps up to {neg.bucket_cap_mb.max():g} MiB (the simulator "
                    f"too slow) and {pos.residual.min():+.0%} to {pos.residual.max():+.0%} from "
                    f"{pos.bucket_cap_mb.min():g} MiB (too fast): it changes sign, and a per-bucket overhead "
                    "of one sign cannot fit both ends (so the held-out error barely moves). What the pattern "
                    "suggests, not tested here: "
                    "gloo's worker threads overlap small buckets' calls (the simulator serialises them), "
                    "and large buckets' copies compete with the backward for the same two cores."
                )
        # between two caps the compute cancels: the error a cap pair carries is the simulator's
        # on the exposed communication (measured: step − no_sync; simulated: the same difference)
        comm = default[default.comm_cost_s > 0]
        err = (comm.simulated_step_s - comm.no_sync_s) / comm.comm_cost_s - 1
        if len(err):
            lines.append(
                f"* Communication alone: two caps differ only in their communication schedule, so a cap "
                f"pair's error is the simulator's on the exposed communication (step − no_sync). Here it "
                f"spans {err.min():+.0%} to {err.max():+.0%} of the measured figure over both sweeps, "
                f"a factor {(1 + err.max()) / (1 + err.min()):.1f} from end to end. It is gloo's error on "
                "two shared cores, not NCCL's at scale, so it is printed, not used: the at-scale rows keep "
                f"the step model's ±{SWITCH_MARGIN:.0%} for a switch, measured on published runs "
                "(chapter 09)."
            )
    lines.append(
        f"* For scale: the calibration's α = {fit['alpha_s'] * 1e6:.0f} µs per ring step stays the machine's "
        f"figure; the per-bucket overhead is DDP's own work per bucket on top of it (its hook, the copy into "
        f"the bucket, issuing the call, its callback). The sensitivity table below adds the larger fit, "
        f"{o * 1e6:.0f} µs, to every simulated bucket at scale — once on the backward's path as fitted, once "
        "also on the communication channel (the pessimistic reading) — and says whether A6 and B8 survive. "
        "The per-step constant is the same at every cap: it moves no choice of cap and is not carried."
    )
    return "\n".join(lines)


def flag_notes(records, table) -> str:
    """The bound each flag is held to, and what this machine can resolve."""
    if table.empty:
        return "*No flag variants in this run.*"
    from mfulab.measure.timing import RUN_TO_RUN_DRIFT

    bw = records["bandwidth"]["plateau_bytes_per_s"]
    grad_mb = gradient_bytes(records) / MB
    base_ms = table.baseline_step_s.iloc[0] * 1e3
    need = verdicts.confirmable_bound(RUN_TO_RUN_DRIFT, B6_SEVERAL_PERCENT_RATIO)
    lines = [
        f"* Gradients: {records['params']['stack_layers'] * 2} tensors, {grad_mb:.1f} MB (fp32); DRAM "
        f"bandwidth {bw / GB:.1f} GB/s (calibration), shared by the ranks of this host: the copy "
        f"gradient_as_bucket_view avoids takes at most {table.copy_avoided_bound_s.max() * 1e3:.2f} ms of "
        f"a {base_ms:.1f} ms step."
    ]
    cost = search_cost(records)
    if cost is not None:
        measured = (
            "a cost beyond the noise: the most static_graph can save there"
            if cost.ratio_lo > 1
            else "no cost beyond the noise (the interval spans 1× or lies below it): static_graph has no "
            "measurable search to save here"
        )
        lines.append(
            f"* find_unused_parameters=True makes the step {cost.ratio:.3f}× [{cost.ratio_lo:.3f}, "
            f"{cost.ratio_hi:.3f}] the default flags' (its per-step graph search and the all-reduce of the "
            f"usage bitmap, {bitmap_allreduce_s(records) * 1e6:.0f} µs by the calibration's α–β): {measured}."
        )
    bounds = ", ".join(
        f"{r.flag} {r.mechanism_bound:.3f}×"
        for r in table.itertuples()
        if r.speed_verdict and r.speed_verdict != "not checkable"
    )
    lines.append(
        f'* Claimed: ≥ {B6_SEVERAL_PERCENT_RATIO:g}× ("several percent"). With ±{RUN_TO_RUN_DRIFT:.0%} '
        f"run-to-run drift on each side an interval is at least {(1 + RUN_TO_RUN_DRIFT) ** 2:.3f}× wide, so "
        f"only a mechanism allowing ≥ {need:.3f}× could be confirmed; the bounds here: {bounds}."
    )
    return "\n".join(lines)


def memory_notes(records, memory) -> str:
    """The gradient memory gradient_as_bucket_view saves, counted and analytic."""
    if memory.empty:
        return "*No memory count in this run.*"
    m = memory.set_index("setting")
    base, view = m.loc["default flags"], m.loc["gradient_as_bucket_view"]
    return (
        f"* Default flags: {base.grad_storages} gradient storages of their own "
        f"({base.separate_grad_bytes / MB:.2f} MB) beside {base.bucket_bytes / MB:.2f} MB of buckets. "
        f"gradient_as_bucket_view: the gradients live in {view.grad_storages} bucket storage(s), "
        f"{view.separate_grad_bytes / MB:.2f} MB of their own. "
        f"Saved per rank: {view.saved_bytes / MB:.2f} MB counted, {view.analytic_saved_bytes / MB:.2f} MB "
        "analytic (the parameter bytes)."
        + (
            f" The copy: one profiled step moves {base.copy_bytes / MB:.2f} MB through aten::copy_ with "
            f"the default flags, {view.copy_bytes / MB:.2f} MB with the flag, "
            f"{view.copy_bytes_avoided / MB:.2f} MB fewer ({view.copy_bytes_avoided / view.grad_bytes:.2f}× "
            "the gradients' bytes). B6's gradient_as_bucket_view row is judged on this copy"
            if "copy_bytes" in m and m.copy_bytes.notna().all()
            else " B6's gradient_as_bucket_view row is judged on this saving"
        )
        + "; its speed stays in the table above."
    )


def scale_setting_text(p) -> str:
    """The stated setting of the scale table and heat map (A6's: article A's cards,
    ``a6_device``): what the step model takes from ``devices.yaml``, and one call's latency under
    NCCL's ring and tree at the largest rank count (the step model's DP group). B8's case
    (article B's A100s, its batch and network) is stated with its row."""
    cards, name = max(p.scale_world_sizes), by_size(p.scale_presets)[0]
    tp = stated_tp(name)
    n = cards // tp
    step = step_model.step_time(
        preset(name),
        n_devices=cards,
        tp=tp,
        global_batch=n * p.scale_micro_batch * stated_accumulation(n, p.scale_micro_batch),
        micro_batch=p.scale_micro_batch,
        device=p.a6_device,
        framework="ddp",
        matmul_share_of_mamf=p.scale_matmul_share_of_mamf,
        grad_bytes_per_elem=SCALE_GRAD_BYTES_PER_ELEM,
    )
    g = step["dp_group"]
    latency = comm.nccl_latency_s("all_reduce", g["dp"], g["n_nodes"], **g["latencies"])
    return (
        f"stated case of the scale table and heat map (A6's): {p.a6_device} from devices.yaml "
        f"({step['sources']['inter_node']}), the step model (chapter 09) with GEMMs at "
        f"{p.scale_matmul_share_of_mamf:g} of MAMF, {p.scale_micro_batch} sequence(s) per rank and "
        f"micro-batch, a global batch of {A6_GLOBAL_BATCH_SEQUENCES} sequences ({A6_GLOBAL_BATCH_SOURCE}; "
        f"{stated_accumulation(n, p.scale_micro_batch)} micro-batches per step for {name} at {cards} cards), "
        f"gradients reduced in fp32; all-reduce algorithm: "
        f"{algorithm_text(p.scale_algorithm)} per call (scale_algorithm; {name} at TP {tp} on {cards} "
        f"cards: {n} data-parallel ranks over {g['n_nodes']} nodes, one call's latency is "
        f"{latency['ring'] * 1e3:.2f} ms on the ring and {latency['tree'] * 1e3:.2f} ms on the tree, NCCL's "
        "latency model). B8's case is article B's run (A100s, 512 sequences per step, one 200 Gb/s "
        "port per node), stated with its rows."
    )


def scale_notes(best) -> str:
    """Where the simulated best cap stands against the article's 20–40 MB, and how far the cap
    moves MFU against its 5–8 points."""
    n = int(best.world_size.max())
    big = best[best.world_size == n]
    layouts = ", ".join(f"{r.preset} TP {r.tp} × DP {r.dp}" for r in big.itertuples())
    return (
        f"* At {n} cards ({layouts}) {sweet_spot_text(big)}.\n"
        f"* At {n} cards {spread_text(big)}. The spread (max − min MFU over the caps "
        f"{plausible_caps_text()}, `spread_points`; over the whole grid, `spread_grid_points`) is the "
        f"claim's quantity; the gain over {DEFAULT_BUCKET_CAP_MB} MiB is what changing DDP's default buys."
    )


def sensitivity_notes(sens) -> str:
    s = sensitivity_summary(sens)
    a6 = ", ".join(s["a6_changed"]) or "none"
    b8 = ", ".join(s["b8_changed"]) or "none"
    defaults = rates.Assumptions()
    return (
        f"* Ties: caps within {TIE_TOLERANCE:.1%} of the fastest simulated step. NCCL's latencies (base, "
        f"ring and tree steps) scaled by {' and '.join(f'{x:g}' for x in SENSITIVITY['nccl_latency_scale'])} "
        f"(the step model's: {defaults.alpha_inter_s * 1e6:g} µs per ring step between nodes, "
        f"{defaults.tree_alpha_intra_s * 1e6:g} µs per tree step inside a node and "
        f"{defaults.tree_alpha_inter_s * 1e6:g} µs between nodes: {comm.NCCL_TUNING_SOURCE.split(':')[0]}).\n"
        f"* A6 (does the best cap lie outside 20–40 MB?): same answer in {s['a6_same']} of "
        f"{s['scenarios']} scenarios; changed under: {a6} — *best*: a model's only best cap lies in "
        "20–40 MB; *tied*: 20–40 MB ties with the best (the all-reduce hides behind the backward pass "
        "and the cap barely matters).\n"
        f"* A6 (does the cap move the article's 13B's MFU by {A6_MFU_POINTS[0]:g}–{A6_MFU_POINTS[1]:g} "
        f"points over {plausible_caps_text()}?): yes in {s['a6_article_in_claim']} of {s['scenarios']}; "
        f"the answer changes under: {', '.join(s['a6_article_changed']) or 'none'}. Any model's spread "
        f"reaches {A6_MFU_POINTS[0]:g} points under: {', '.join(s['a6_spread_reaching']) or 'none'}.\n"
        f"* B8 (at article B's run, does 50–100 MiB beat 25 MiB for 7B on {B8_STATED['ranks']} cards: "
        "gains, tied within "
        f"{TIE_TOLERANCE:.1%} of the MFU, or reversed?): same answer in "
        f"{s['b8_same']} of {s['scenarios']}; changed under: {b8}.\n"
        + _algorithm_note(sens)
        + "* The last two rows carry the simulator's model error on this machine (the fitted per-bucket "
        "overhead) to scale: the simulator's answers should not hang on an error it makes here."
    )


def _algorithm_note(sens) -> str:
    """What the ring-only row does to each answer."""
    rows = sens[sens.assumption == "all-reduce algorithm"]
    same = {True: "the same", False: "changed"}
    return "".join(
        f"* All-reduce algorithm {r.value} (instead of the faster of ring and tree per call; the ring "
        f"pays 2(n−1) steps of latency per call at {r.a6_layouts}): best caps "
        f"{r.a6_best_caps_mib} MiB, A6's sweet-spot answer "
        f"{same[bool(r.a6_conclusion_same)]}, the spread {r.a6_max_spread_points:.1f} points "
        f"({'reaches' if r.a6_spread_reaches_claim else 'below'} the claim's {A6_MFU_POINTS[0]:g}), "
        f"B8's answer {same[bool(r.b8_conclusion_same)]} ({r.b8_gain_50_100_vs_25_points:+.2f} points). "
        "NCCL chooses between ring and tree per call by message size and rank count (its tuning model), "
        "so the stated 'faster of the two' is itself an assumption.\n"
        for r in rows.itertuples()
    )


def _fitted_survival(sens) -> str:
    rows = sens[sens.assumption == FITTED]
    if not len(rows):
        return "no fitted overhead"

    def fate(column: str) -> str:
        changed = [
            where
            for where, same in zip(("on the backward's path", "also on the channel"), rows[column])
            if not same
        ]
        if not changed:
            return "survives under both placements of the overhead"
        return f"changes with the overhead {' and '.join(changed)}" + (
            " (the pessimistic placement, which decides no verdict)"
            if changed == ["also on the channel"]
            else ""
        )

    return f"A6's answer {fate('a6_conclusion_same')}; B8's {fate('b8_conclusion_same')}"


def summary(records, sweep, claim_list, m: dict | None) -> str:
    """The closing bullets (``m``: A6 measured here, ``analysis.a6_measured``)."""
    lines = []
    if m:
        c = m["per_tensor"]
        lines.append(
            f"* One bucket per tensor ({m['buckets']} all-reduces per step) made the step "
            f"{c.ratio:.1f}× [{c.ratio_lo:.1f}, {c.ratio_hi:.1f}] slower than the fastest cap "
            f"({m['best']:g} MiB by the median; tied within the interval: "
            f"{caps_text(tied_fastest_caps(records))}), real compute, in a toy regime: a call's set-up "
            f"latency is {a6_regime(records)['ratio']:.0f}× the average tensor's transfer here, against "
            "a few times at most at the article's scale (section 4 prices that case)."
        )
    lines.append(
        "* DDP's bucket layouts match the formation rules exactly; gradients equal the single-process "
        "reference."
    )
    fits = fit_table(records)
    if not fits.empty:
        lines.append(
            "* The simulator with the calibration's α–β alone misses the measured steps (RMS relative error "
            + ", ".join(f"{r.rms_error_alpha_beta:.0%} {r.mode}" for r in fits.itertuples())
            + "); a fitted per-bucket overhead ("
            + ", ".join(f"{r.per_bucket_overhead_s * 1e6:.0f} µs {r.mode}" for r in fits.itertuples())
            + ") and per-step constant bring it to "
            + ", ".join(f"{r.rms_error_fitted:.0%}" for r in fits.itertuples())
            + " in sample, "
            + ", ".join(
                f"{r.rms_error_held_out:.0%}"
                for r in fits.itertuples()
                if r.rms_error_held_out == r.rms_error_held_out and r.rms_error_held_out is not None
            )
            + " on caps held out of the fit"
            + f"; carried to scale, {_fitted_survival(sensitivity_table(records))}."
        )
    lines.append(summary_line(claim_list))
    return "\n".join(lines)
