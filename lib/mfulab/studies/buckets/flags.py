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
  search the autograd graph every iteration (``find_unused_parameters=True``); it also makes
  cases work that otherwise fail — reentrant backward, activation checkpointing run more than
  once or with unused parameters, parameters used outside ``forward``. With none of these
  (DDP's logging data says whether the search ran and how many parameters went unused) its
  expected effect is 1.00×.

A measured effect outside ``[1, bound]`` is noise or another effect, never the mechanism, so
it cannot confirm the claim. Confirmation needs the whole drift-widened interval inside
``[claimed, bound]``; its width is at least ``(1 + drift)²``, so where the bound is below
``claimed · (1 + drift)²`` no run can confirm, and the verdict is *inconclusive on this machine*
by construction: the same in every fresh run.
"""

from __future__ import annotations

import math

from ...config import preset
from ...timing import compare_timings, summarize
from ...verdicts import Claim
from .simulator import model_layout
from .stated import B6_ARTICLE, B6_SEVERAL_PERCENT_RATIO

FLAG_VARIANTS = ("bucket_view", "static_graph", "bucket_view+static_graph")


def flag_name(variant: str) -> str:
    return variant.replace("bucket_view", "gradient_as_bucket_view")


def gradient_bytes(records) -> int:
    """fp32 gradient bytes of the measured stack (weights and biases of every layer)."""
    p = records["params"]
    return p["stack_layers"] * (p["stack_hidden"] ** 2 + p["stack_hidden"]) * 4


def copy_bound_s(grad_bytes: float, bandwidth_bytes_per_s: float, ranks_sharing: int) -> float:
    """The most time one avoided gradient copy can take: ``2 · grad_bytes`` (read + write)
    at ``bandwidth / ranks_sharing`` (the ranks of one host share its memory bandwidth)."""
    moved_bytes = 2.0 * grad_bytes
    bandwidth_per_rank = bandwidth_bytes_per_s / ranks_sharing
    return moved_bytes / bandwidth_per_rank


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


def flag_table(records):
    """Per flag variant: the interleaved speed-up over the default flags (ratio, the widened
    interval and this run's), the mechanism's bound, and the verdict."""
    import pandas as pd

    rows = flag_rows(records)
    if "default" not in rows:
        return pd.DataFrame()
    base = _timing(rows["default"], "default")
    ranks_sharing = records["ddp"]["world_size"] if records["device"] == "cpu" else 1
    grad_bytes = gradient_bytes(records)
    copy_s = copy_bound_s(grad_bytes, records["bandwidth"]["plateau_bytes_per_s"], ranks_sharing)
    out = []
    for variant in FLAG_VARIANTS:
        if variant not in rows:
            continue
        c = compare_timings(base, _timing(rows[variant], variant))
        saved_s = copy_s if "bucket_view" in variant else 0.0
        case = static_graph_case(records, variant) if "static_graph" in variant else None
        bound = math.inf if case else base.median_s / (base.median_s - min(saved_s, 0.99 * base.median_s))
        out.append(
            {
                "flag": flag_name(variant),
                "speedup": c.ratio,
                "lo": c.ratio_lo,
                "hi": c.ratio_hi,
                "within_lo": c.within_lo,
                "within_hi": c.within_hi,
                "rounds": base.n,
                "default_step_s": base.median_s,
                "copy_avoided_bound_s": saved_s,
                "mechanism_bound": bound,
                "static_graph_case": case or "",
                "verdict": flag_verdict(c, bound),
            }
        )
    return pd.DataFrame(out)


def confirmable_bound(drift: float, claimed: float = B6_SEVERAL_PERCENT_RATIO) -> float:
    """The smallest mechanism bound under which a confirmation is possible at all: an interval
    at least ``(1 + drift)²`` wide must fit in ``[claimed, bound]``."""
    return claimed * (1 + drift) ** 2


def flag_verdict(c, bound: float, claimed: float = B6_SEVERAL_PERCENT_RATIO) -> str:
    """Confirmed only when the widened interval lies in ``[claimed, bound]``; inconclusive when
    no interval can (bound below :func:`confirmable_bound`) or the interval lies outside what
    the mechanism allows (entirely above the bound or below 1.0: noise or another effect);
    refuted when the interval lies below the claimed size and within the mechanism's range."""
    if bound < confirmable_bound(c.run_to_run_drift, claimed):
        return "inconclusive on this machine"
    if c.ratio_lo > bound or c.ratio_hi < 1.0:
        return "inconclusive on this machine"
    if c.ratio_lo >= claimed and c.ratio_hi <= bound:
        return "confirmed"
    if c.ratio_hi < claimed:
        return "refuted"
    return "inconclusive on this machine"


def article_bound() -> dict:
    """The copy bound at the article's scale (``stated.B6_ARTICLE``): the largest share of the
    9.0 s step that the copy ``gradient_as_bucket_view`` avoids could take."""
    a = B6_ARTICLE
    params = sum(n for _, n in model_layout(preset(a["preset"])))
    copy_s = copy_bound_s(params * a["grad_bytes_per_param"], a["hbm_bytes_per_s"], 1)
    return {"params": params, "copy_s": copy_s, "step_s": a["step_s"], "share": copy_s / a["step_s"]}


def _evidence(r, drift: float) -> str:
    measured = f"speed-up {r.speedup:.3f}× [{r.lo:.3f}, {r.hi:.3f}] over {r.rounds} interleaved rounds"
    if r.static_graph_case:
        mech = f"static_graph skips DDP's per-step graph search here ({r.static_graph_case}): no bound"
    elif r.copy_avoided_bound_s:
        mech = (
            f"the copy it avoids takes ≤ {r.copy_avoided_bound_s * 1e3:.2f} ms of the "
            f"{r.default_step_s * 1e3:.1f} ms step: ≤ {r.mechanism_bound:.3f}×"
        )
    else:
        mech = "with no unused parameters, no find_unused_parameters and no checkpointing: expected 1.00×"
    need = confirmable_bound(drift)
    if r.mechanism_bound < need:
        why = (
            f"; a confirmation needs an interval inside [{B6_SEVERAL_PERCENT_RATIO:g}, bound], possible "
            f"only for a bound ≥ {need:.3f}× (±{drift:.0%} run-to-run drift): none on this machine"
        )
    elif r.lo > r.mechanism_bound or r.hi < 1.0:
        why = "; the measured effect lies outside what the mechanism allows: noise or another effect"
    else:
        why = ""
    return f"{measured}; mechanism: {mech}{why}"


def claims(records) -> list[Claim]:
    """Three measured rows (each flag and both, at ``flags_bucket_cap_mb``) and the bound at
    the article's scale (analytic)."""
    from ...timing import RUN_TO_RUN_DRIFT

    table = flag_table(records)
    if table.empty:
        return []
    cap = records["params"]["flags_bucket_cap_mb"]
    what = {
        "gradient_as_bucket_view": "gradient_as_bucket_view saves a gradient copy",
        "static_graph": "static_graph spares DDP repeated analysis of the autograd graph",
        "gradient_as_bucket_view+static_graph": "together the two flags save several percent",
    }
    out = [
        Claim(
            "B6",
            what[r.flag],
            f"interleaved DDP steps at bucket_cap_mb={cap:g}, real compute, vs the default flags "
            f"(claimed ≥ {B6_SEVERAL_PERCENT_RATIO:g}×)",
            r.verdict,
            _evidence(r, RUN_TO_RUN_DRIFT),
        )
        for r in table.itertuples()
    ]
    a = article_bound()
    out.append(
        Claim(
            "B6",
            "together the two flags save several percent at scale",
            f"the mechanisms' bound for article B's 7B case ({a['step_s']:g} s steps on A100)",
            "analytic only",
            f"the copy gradient_as_bucket_view avoids: {a['params'] / 1e9:.1f} billion fp32 gradients "
            f"({a['params'] * B6_ARTICLE['grad_bytes_per_param'] / 1e9:.0f} GB) read and written once at "
            f"{B6_ARTICLE['hbm_bytes_per_s'] / 1e12:.3f} TB/s = {a['copy_s'] * 1e3:.0f} ms, "
            f"≤ {a['share']:.1%} of the step; static_graph saves a per-step graph search only with "
            "find_unused_parameters=True. 'Several percent' is more than these mechanisms allow; the "
            "flags also cut gradient memory (the bucket view) — a gain elsewhere (a larger batch)",
        )
    )
    return out


def headline(records) -> dict:
    """Flat numbers for metrics.json and the stability check."""
    table = flag_table(records)
    out = {}
    for r in table.itertuples():
        key = r.flag.replace("+", "_and_")
        out[f"{key}_speedup"] = r.speedup
    if len(table):
        out["gradient_copy_bound_s"] = float(table.copy_avoided_bound_s.max())
    return out
