"""B6: DDP's ``gradient_as_bucket_view`` and ``static_graph`` flags against the default flags,
each next to the largest speed-up its mechanism allows.

The mechanisms (PyTorch ``DistributedDataParallel`` docs and ``reducer.cpp``):

- ``gradient_as_bucket_view``: without it, DDP copies each gradient into its bucket (scaled
  by 1/world size) before the all-reduce and copies the reduced bucket back into ``.grad``
  after it; with it, ``.grad`` *is* a view of the bucket and one of the two passes goes (the
  copy back; when gradients are kept between steps the copy in becomes an in-place
  division). Saved per step: one read and one write of every gradient byte, so at most
  ``2 · gradient_bytes / bandwidth`` seconds — at the DRAM bandwidth of the machine's
  calibration, shared by the ranks of one host (a CPU host's ranks copy from the same memory;
  each GPU has its own). A gradient set small enough to sit in the last-level cache copies
  faster, so this is an upper bound.
- ``static_graph``: changes the work of a steady-state step only where DDP would otherwise
  search the autograd graph every iteration (``find_unused_parameters=True``: the search in
  ``prepare_for_backward`` and an all-reduce of the bitmap of used parameters, every step;
  with static_graph, only in the first iterations); it also makes cases work that otherwise
  fail — reentrant backward, activation checkpointing run more than once or with unused
  parameters, parameters used outside ``forward``. With none of these (DDP's logging data
  says whether the search ran and how many parameters went unused) its expected effect is
  1.00×. With ``find_unused_parameters=True`` (variants ``find_unused`` and
  ``find_unused+static_graph``, timed in the same rounds) it saves at most what the search
  costs: the step with ``find_unused_parameters=True`` over the default flags' — its median
  ratio is the bound (the usage bitmap's all-reduce alone is ~2α by the calibration). Against the
  default flags the mechanism is absent: that row is timed in the flags table only.

An effect outside ``[1, bound]`` is never the mechanism. Confirmation needs the whole
drift-widened interval (width ≥ ``(1 + drift)²``) inside ``[claimed, bound]``: where the bound
is below ``claimed · (1 + drift)²`` the verdict is *inconclusive on this machine* in every run.

"gradient_as_bucket_view saves a gradient copy" is judged on the copy (``grad_memory``: confirmed
when the ``aten::copy_`` bytes one profiled step spares equal one copy of the gradients), with
the memory it saves, its documented benefit, beside it; its speed effect stays in the flags table
and in the "together" row.
"""

from __future__ import annotations

import math

from mfulab.analytic.comm import ring_all_reduce_time
from mfulab.measure.timing import compare_timings, summarize
from mfulab.studies.buckets.b6_scale import COPIES_AVOIDED, at_scale_claim, copy_bound_s
from mfulab.studies.buckets.grad_memory import copy_row, memory_table
from mfulab.studies.buckets.stated import B6_SEVERAL_PERCENT_RATIO
from mfulab.studies.buckets.static_graph_doc import static_graph_first_iteration, with_default_reading
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim

# variant: its baseline (the flags it is timed against, in the same interleaved rounds)
FLAG_VARIANTS = {
    "bucket_view": "default",
    "static_graph": "default",
    "bucket_view+static_graph": "default",
    "find_unused": "default",  # not a claim: the cost of DDP's per-step search, static_graph's bound
    "find_unused+static_graph": "find_unused",
}


def flag_name(variant: str) -> str:
    return variant.replace("bucket_view", "gradient_as_bucket_view").replace(
        "find_unused", "find_unused_parameters"
    )


def gradient_bytes(records) -> int:
    """fp32 gradient bytes of the measured stack (weights and biases of every layer)."""
    p = records["params"]
    return p["stack_layers"] * (p["stack_hidden"] ** 2 + p["stack_hidden"]) * 4


def static_graph_case(records, variant: str) -> str | None:
    """The case in which ``static_graph`` changes a steady-state step, or ``None`` when the run
    has none: DDP searched the graph for unused parameters, or some went unused."""
    flags = records["ddp"].get("ddp_flags", {})
    cap = records["params"]["flags_bucket_cap_mb"]
    data = {}
    for key, value in flags.items():
        mode, key_cap, key_variant = key.split(":")
        if mode == "real" and key_variant == variant and float(key_cap) == cap:
            data = value
    if data.get("find_unused_parameters"):
        return "find_unused_parameters=True"
    if data.get("unused_parameter_size"):
        return f"{data['unused_parameter_size']} unused parameters"
    return None


def _timing(row, label):
    return summarize(row["step_times_s"], label=label, paired=True)


def flag_rows(records) -> dict:
    """{variant: (row)} of the real-compute rows at the flags' cap (default included)."""
    cap = records["params"]["flags_bucket_cap_mb"]
    return {
        r["variant"]: r for r in records["ddp"]["rows"] if r["mode"] == "real" and r["bucket_cap_mb"] == cap
    }


def search_cost(records, rows=None):
    """``find_unused_parameters=True`` against the default flags (a ``Comparison``: its ratio is
    how many times the default step the search's step takes), or ``None`` when not timed. It
    bounds what ``static_graph`` can save there: static_graph skips the per-step search and
    the all-reduce of the usage bitmap, nothing more."""
    rows = rows or flag_rows(records)
    if "find_unused" not in rows or "default" not in rows:
        return None
    return compare_timings(_timing(rows["find_unused"], "find_unused"), _timing(rows["default"], "default"))


def bitmap_allreduce_s(records) -> float:
    """The per-step all-reduce of DDP's usage bitmap under ``find_unused_parameters=True``
    (one int32 per parameter tensor), by the calibration's ring α–β."""
    d = records["ddp"]
    fit = d["allreduce_fit"]
    nbytes = 2 * records["params"]["stack_layers"] * 4
    return ring_all_reduce_time(
        nbytes, d["world_size"], alpha_s=fit["alpha_s"], link_bytes_per_s=fit["link_bytes_per_s"]
    )


def flag_table(records):
    """Per flag variant: the interleaved speed-up over its baseline (ratio, the widened interval
    and this run's), the mechanism's bound, and the verdict on speed (``speed_verdict``: empty
    for the search-cost row, which is no claim; *not checkable* for static_graph against the
    default flags, where its mechanism is absent)."""
    import pandas as pd

    rows = flag_rows(records)
    if "default" not in rows:
        return pd.DataFrame()
    ranks_sharing = records["ddp"]["world_size"] if records["device"] == "cpu" else 1
    copy_s = copy_bound_s(gradient_bytes(records), records["bandwidth"]["plateau_bytes_per_s"], ranks_sharing)
    cost = search_cost(records, rows)
    out = []
    for variant, baseline in FLAG_VARIANTS.items():
        if variant not in rows or baseline not in rows:
            continue
        base = _timing(rows[baseline], baseline)
        c = compare_timings(base, _timing(rows[variant], variant))
        saved_s = copy_s if "bucket_view" in variant else 0.0
        case = static_graph_case(records, variant) if "static_graph" in variant else None
        if variant == "find_unused":
            bound = math.nan
        elif case:  # static_graph can save at most what the search costs (its median)
            bound = max(1.0, cost.ratio) if cost else math.inf
        else:
            bound = base.median_s / (base.median_s - min(saved_s, 0.99 * base.median_s))
        out.append(
            {
                "flag": flag_name(variant),
                "baseline": f"{flag_name(baseline)}=True" if baseline != "default" else "default flags",
                "speedup": c.ratio,
                "lo": c.ratio_lo,
                "hi": c.ratio_hi,
                "within_lo": c.within_lo,
                "within_hi": c.within_hi,
                "rounds": base.n,
                "baseline_step_s": base.median_s,
                "copy_avoided_bound_s": saved_s,
                "mechanism_bound": bound,
                "static_graph_case": case or "",
                "speed_verdict": _speed_verdict(variant, case, c, bound),
            }
        )
    return pd.DataFrame(out)


def _speed_verdict(variant: str, case: str | None, c, bound: float) -> str:
    if variant == "find_unused":
        return ""
    if variant == "static_graph" and not case:
        return "not checkable"  # no per-step graph analysis to spare: outside the claim's mechanism
    return flag_verdict(c, bound)


def flag_verdict(c, bound: float, claimed: float = B6_SEVERAL_PERCENT_RATIO) -> str:
    """:func:`verdicts.verdict_in_range` of the comparison's widened interval against
    ``[claimed, bound]``, the mechanism's bound."""
    return verdicts.verdict_in_range(
        c.ratio_lo, c.ratio_hi, claimed=claimed, bound=bound, drift=c.run_to_run_drift
    )


def _mechanism(records, r) -> str:
    if r.static_graph_case:
        cost = search_cost(records)
        if cost is None:
            return f"static_graph skips DDP's per-step graph search here ({r.static_graph_case}): no bound"
        return (
            f"with {r.static_graph_case} DDP searches the autograd graph and all-reduces a usage bitmap "
            f"every step ({bitmap_allreduce_s(records) * 1e6:.0f} µs by the calibration's α–β); static_graph "
            f"skips both, so it saves at most what find_unused_parameters=True costs over the default flags, "
            f"measured {cost.ratio:.3f}× [{cost.ratio_lo:.3f}, {cost.ratio_hi:.3f}]: "
            f"≤ {r.mechanism_bound:.3f}× (the median; the bitmap's all-reduce alone is "
            f"{bitmap_allreduce_s(records) / r.baseline_step_s:.1%} of the step)"
        )
    if r.copy_avoided_bound_s:
        return (
            f"the copy it avoids takes ≤ {r.copy_avoided_bound_s * 1e3:.2f} ms of the "
            f"{r.baseline_step_s * 1e3:.1f} ms step: ≤ {r.mechanism_bound:.3f}×"
        )
    return "with no unused parameters, no find_unused_parameters and no checkpointing: expected 1.00×"


def _evidence(records, r, drift: float) -> str:
    measured = f"speed-up {r.speedup:.3f}× [{r.lo:.3f}, {r.hi:.3f}] over {r.rounds} interleaved rounds"
    need = verdicts.confirmable_bound(drift, B6_SEVERAL_PERCENT_RATIO)
    if r.speed_verdict == "not checkable":
        why = (
            "; outside the claim's mechanism: with the default flags DDP does no per-step analysis of the "
            "autograd graph, so static_graph has nothing to spare and no measurement here can test the "
            "claim (tested in the find_unused_parameters=True row)"
        )
    elif r.mechanism_bound < need:
        why = (
            f"; a confirmation needs an interval inside [{B6_SEVERAL_PERCENT_RATIO:g}, bound], possible "
            f"only for a bound ≥ {need:.3f}× (±{drift:.0%} run-to-run drift): none on this machine"
        )
    elif r.lo > r.mechanism_bound or r.hi < 1.0:
        why = "; the measured effect lies outside what the mechanism allows: noise or another effect"
    else:
        why = ""
    return f"{measured}; mechanism: {_mechanism(records, r)}{why}"


def _memory_claim(records, r, cap: float, drift: float) -> Claim:
    """gradient_as_bucket_view saves a gradient copy: judged on the copy (``grad_memory.copy_row``),
    with the memory it saves and the speed beside it."""
    verdict, method, evidence = copy_row(records, cap, COPIES_AVOIDED)
    return Claim(
        "B6",
        "gradient_as_bucket_view saves a gradient copy",
        method,
        verdict,
        f"{evidence}; speed, not the verdict (bound by the copy's bytes): " + _evidence(records, r, drift),
        basis=verdicts.CONSTRUCTION,
    )


def b6_claims(records, table, exposed_s: dict | None = None) -> list[Claim]:
    """The measured rows (each flag and both against the default flags; static_graph with
    find_unused_parameters=True against that alone, at ``flags_bucket_cap_mb``) and the bound
    at the article's scale (analytic). ``table``: :func:`flag_table` of the records;
    ``exposed_s``: the exposed gradient reduction's lower bound per number of micro-batches
    (``b8_case.b6_exposed_reduction``)."""
    from mfulab.measure.timing import RUN_TO_RUN_DRIFT

    if table.empty:
        return []
    cap = records["params"]["flags_bucket_cap_mb"]
    what = {
        "gradient_as_bucket_view": "gradient_as_bucket_view saves a gradient copy",
        "static_graph": "static_graph spares DDP repeated analysis of the autograd graph",
        "gradient_as_bucket_view+static_graph": "together the two flags save several percent",
        "find_unused_parameters+static_graph": "static_graph spares DDP repeated analysis of the autograd "
        "graph (another configuration than the article's call, which sets no find_unused_parameters: "
        "the mechanism where DDP analyses the graph every step)",
    }
    out = [
        _memory_claim(records, r, cap, RUN_TO_RUN_DRIFT)
        if r.flag == "gradient_as_bucket_view"
        else Claim(
            "B6",
            what[r.flag],
            f"interleaved DDP steps at bucket_cap_mb={cap:g}, real compute, vs {r.baseline} "
            f"(claimed ≥ {B6_SEVERAL_PERCENT_RATIO:g}×)",
            r.speed_verdict,
            _evidence(records, r, RUN_TO_RUN_DRIFT),
            basis=verdicts.TOY,
        )
        for r in table.itertuples()
        if r.speed_verdict and r.speed_verdict != "not checkable"
    ]
    out = [with_default_reading(c, table) for c in out]
    out.append(at_scale_claim(records, exposed_s))
    out.append(static_graph_first_iteration())
    return out


def headline(records, table) -> dict:
    """Flat numbers for metrics.json and the stability check (``table``: :func:`flag_table`)."""
    out = {}
    for r in table.itertuples():
        key = r.flag.replace("+", "_and_")
        out[f"{key}_speedup"] = r.speedup
    if len(table):
        out["gradient_copy_bound_s"] = float(table.copy_avoided_bound_s.max())
    memory = memory_table(records)
    if len(memory):
        out["bucket_view_memory_saved_bytes"] = int(memory.saved_bytes.max())
    return out
