"""B8's readings of article B's run held against the article's own step times.

Article B's §5.2 tuned in order: step 2 (the cap 25 → 50 MB and two DDP flags, 9.4 → 9.0 s) came
*before* step 3 (NCCL's GDR and buffers, 9.0 → 8.7 s), and §3.3 measured what step 3 did to the
network: the two-node all-reduce busbw rose from 11 to 21 GB/s. So B8's tail is a tail on the
untuned network, and any reading of the run (how the gradients are reduced, how many 200 Gb/s
ports a node has, the micro-batch) must reproduce two of the article's figures at once:

* the step before step 2, at 25 MiB on the untuned network: 9.4 s;
* what step 3 saved, the step at 50 MiB on the untuned network minus the same on the tuned one:
  0.3 s.

Each reading is priced by the bucket simulator (``simulator.gpt_simulation``, the course's step
model underneath) with the network set from the article's measured busbw: one port per node puts
each of its 8 GPUs' share of the busbw on the ring, one port per GPU the whole busbw (the busbw is
already what the link delivers, so the model's link efficiency is taken back out). A reading
*holds* when step 3's saving lies within the step model's margin for a switch (``SWITCH_MARGIN``)
carried to a difference of two steps, ±margin × the step (not ± margin × the saving: the error
is on each step), and the layout fits the card. The step itself is printed against 9.4 s but
gates nothing: chapter 09's rule lets the model decide a ratio beyond its margin, never a step
time on its own (until 2026-12-07 both figures gated at ±margin of themselves, which dropped the
one-port-per-node reading on a precision the model does not have; round fourteen's reader of
chapter 09). B8's tail is then decided on the readings that hold (:func:`gated_rows`)."""

from __future__ import annotations

from mfulab.analytic.config import preset
from mfulab.analytic.rates import Assumptions
from mfulab.studies.buckets import sensitivity
from mfulab.studies.buckets.simulator import gpt_simulation
from mfulab.studies.buckets.stated import B8_ARTICLE, B8_BUSBW_GBPS, B8_STATED, B8_STEP3_S
from mfulab.studykit.step_error import SWITCH_MARGIN

GB = 1e9
GPUS_PER_NODE = 8  # article B §1: 8 nodes of 8 A100s

# The readings of article B's run: the stated case first (DDP's fp32 buckets, one port per node,
# one sequence per micro-batch), then one input changed at a time: §4's DataLoader batch_size=8,
# gradients reduced in bf16, one 200 Gb/s port per GPU (a DGX A100's eight; §3.3's two-node test
# may have run one GPU per node, where either layout gives the same busbw).
READINGS = (
    {"reading": "stated: DDP fp32 buckets, one port per node, micro-batch 1"},
    {"reading": "micro-batch 8 (§4's DataLoader)", "micro_batch": 8},
    {"reading": "bf16 gradients", "grad_bytes_per_elem": 2},
    {"reading": "one port per GPU", "ports_per_node": GPUS_PER_NODE},
    {
        "reading": "one port per GPU, bf16 gradients",
        "ports_per_node": GPUS_PER_NODE,
        "grad_bytes_per_elem": 2,
    },
)


def network_bytes_per_s(busbw_gbps: float, ports_per_node: int) -> float:
    """The simulator's ``network_bytes_per_s`` (a GPU's share of the inter-node link, before the
    model's ``link_efficiency``) that delivers the article's measured busbw: each GPU's share of
    the node's ports, with the efficiency the measurement already holds taken back out."""
    per_gpu_delivered = busbw_gbps * GB * ports_per_node / GPUS_PER_NODE
    return per_gpu_delivered / Assumptions().link_efficiency


def _steps(
    records, reading: dict, busbw_gbps: float, caps, scenario: dict | None = None, accumulation=None
) -> dict:
    """``{cap: simulator row}`` of article B's 7B run under ``reading`` on a network of
    ``busbw_gbps``, the other inputs from ``scenario`` (``sensitivity.scenarios``; the stated
    one by default), at the article's global batch unless ``accumulation`` is given."""
    p = records["params"]
    (seven_b,) = [m for m in p["scale_presets"] if "7b" in m][:1]
    stated = sensitivity.b8_scenario(scenario or sensitivity.scenarios(p)[0], seven_b)
    tp = sensitivity.stated_tp(seven_b)
    dp = B8_STATED["ranks"] // tp
    micro_batch = reading.get("micro_batch", stated["setting"]["micro_batch"])
    setting = {
        **stated["setting"],
        "micro_batch": micro_batch,
        "grad_bytes_per_elem": reading.get("grad_bytes_per_elem", stated["setting"]["grad_bytes_per_elem"]),
        "network_bytes_per_s": network_bytes_per_s(busbw_gbps, reading.get("ports_per_node", 1)),
    }
    accumulation = accumulation or max(1, B8_ARTICLE["global_batch"] // (dp * micro_batch))
    rows = gpt_simulation(
        preset(seven_b), n=dp, tp=tp, bucket_caps_mb=list(caps), accumulation=accumulation, **setting
    )
    return {r["bucket_cap_mb"]: r for r in rows}


def tail_cut(rows_by_cap: dict) -> dict:
    """The communication tail at 25 MiB (the all-reduce still running after the backward), the
    best of 50/100 MiB's, and how much of the tail that cap removes; beside it the most any cap
    can remove: the last micro-batch's backward (the only one the reduction can run under; the
    others run under ``no_sync``) plus the calls' latency the larger cap saves."""
    base = rows_by_cap[B8_STATED["default_cap_mb"]]
    better = min(  # the cap the share is computed at
        (rows_by_cap[c] for c in B8_STATED["better_caps_mb"]), key=lambda r: r["exposed_comm_s"]
    )
    tail_s = base["exposed_comm_s"]
    bound_s = base["last_backward_s"] + max(0.0, base["total_comm_s"] - better["total_comm_s"])
    return {
        "tail_25_s": tail_s,
        "tail_best_50_100_s": better["exposed_comm_s"],
        "best_cap_mb": better["bucket_cap_mb"],
        "tail_cut_share": sensitivity.b8_tail_cut_share(rows_by_cap),
        "last_backward_s": base["last_backward_s"],
        "most_cut_s": bound_s,
        "most_cut_share": min(1.0, bound_s / tail_s) if tail_s > 0 else 0.0,
    }


def saving_within(modelled_s: float, stated_s: float, step_s: float, margin: float = SWITCH_MARGIN) -> bool:
    """A modelled saving (the difference of two modelled steps of about ``step_s``) within the
    model's error of the article's: each step may be off by ``margin`` of itself, so the
    difference by about ``margin`` × ``step_s``, whatever the saving's own size."""
    return abs(modelled_s - stated_s) <= margin * step_s


def consistency_table(records):
    """One row per reading: the step at 25 MiB before step 3 against the article's 9.4 s, step
    3's saving at 50 MiB against its 0.3 s, whether the reading holds, and the tail at 25 MiB on
    the untuned network with what 50 and 100 MiB cut from it (B8's own quantity). Empty where the
    run has no 7B at scale."""
    import pandas as pd

    if not any("7b" in m for m in records["params"]["scale_presets"]):
        return pd.DataFrame()
    base, step2_cap = B8_STATED["default_cap_mb"], B8_ARTICLE["step2_cap_mb"]
    caps = (base, *B8_STATED["better_caps_mb"])
    before_gbps, after_gbps = B8_BUSBW_GBPS["before"], B8_BUSBW_GBPS["after"]
    step3_saved_s = B8_STEP3_S["before"] - B8_STEP3_S["after"]
    rows = []
    for reading in READINGS:
        untuned = _steps(records, reading, before_gbps, caps)
        tuned = _steps(records, reading, after_gbps, (step2_cap,))
        step_s = untuned[base]["step_s"]
        saved_s = untuned[step2_cap]["step_s"] - tuned[step2_cap]["step_s"]
        rows.append(
            {
                "reading": reading["reading"],
                "step_25_untuned_s": step_s,
                "step3_saved_s": saved_s,
                "holds_step3": saving_within(saved_s, step3_saved_s, step_s),
                **tail_cut(untuned),
                "step2_cap_saved_s": step_s - untuned[step2_cap]["step_s"],
                "fits": bool(untuned[base]["fits"]),
            }
        )
    t = pd.DataFrame(rows)
    t["holds"] = t.holds_step3 & t.fits  # as DDP, the claim's buckets, it must fit the card
    return t


def consistency_text(t) -> str:
    """The readings against the article's two figures, one clause each."""
    a = B8_ARTICLE
    saved = B8_STEP3_S["before"] - B8_STEP3_S["after"]
    return (
        f"held against the article's own figures (the step at 25 MiB before NCCL's tuning, "
        f"{a['step_before_s']:g} s; what the tuning saved, {saved:.1f} s, as busbw went "
        f"{B8_BUSBW_GBPS['before']:g} → {B8_BUSBW_GBPS['after']:g} GB/s; the saving within "
        f"±{SWITCH_MARGIN:.0%} "
        "of the step, the error on a difference of two steps; the step printed, not gated: a single "
        "modelled step decides nothing, chapter 09)"
        + (
            f". At that margin the saving may be off by ±{SWITCH_MARGIN * t.step_25_untuned_s.min():.1f} s "
            f"or more, wider than the {saved:.1f} s it checks: no reading can fail it, so the gate "
            "separates no reading and every reading that fits the card votes"
            if SWITCH_MARGIN * t.step_25_untuned_s.min() > saved
            else ""
        )
        + ": "
        + "; ".join(
            f"{r.reading}: {r.step_25_untuned_s:.2f} s ({r.step_25_untuned_s / a['step_before_s']:.2f}× "
            f"the article's) and {r.step3_saved_s:.2f} s saved, "
            + ("holds" if r.holds else "fails (" + _why(r) + ")")
            for r in t.itertuples()
        )
    )


def _why(r) -> str:
    misses = []
    if not r.holds_step3:
        misses.append("the tuning's saving")
    if not r.fits:
        misses.append("does not fit the card")
    return " and ".join(misses)


# The sensitivity rows that vary an input neither the article nor a reading states: they vote
# on each reading that holds (the others, cards, sharding, network, accumulation and the gradients'
# precision, are the readings themselves or another configuration than the article's)
VOTING_ASSUMPTIONS = ("stated", "latency per step", "GEMM share of MAMF", "all-reduce algorithm")


def gated_rows(records, table):
    """For every reading that holds (:func:`consistency_table`), B8's tail on the untuned network
    (:func:`tail_cut`) and step 2's cap saving, over the sensitivity rows of
    :data:`VOTING_ASSUMPTIONS`."""
    import pandas as pd

    holding = set(table[table.holds].reading) if len(table) else set()
    base, step2_cap = B8_STATED["default_cap_mb"], B8_ARTICLE["step2_cap_mb"]
    caps = (base, *B8_STATED["better_caps_mb"])
    rows = []
    for reading in (r for r in READINGS if r["reading"] in holding):
        for s in sensitivity.scenarios(records["params"]):
            if s["assumption"] not in VOTING_ASSUMPTIONS:
                continue
            by_cap = _steps(records, reading, B8_BUSBW_GBPS["before"], caps, scenario=s)
            rows.append(
                {
                    "reading": reading["reading"],
                    "scenario": _scenario_label(s),
                    **tail_cut(by_cap),
                    "step2_cap_saved_s": by_cap[base]["step_s"] - by_cap[step2_cap]["step_s"],
                }
            )
    return pd.DataFrame(rows)


def _scenario_label(s: dict) -> str:
    """``stated``, ``NCCL's latencies × 2``, ``GEMM share of MAMF 0.5``, ``ring only``."""
    if s["assumption"] == "stated":
        return "stated"
    value = str(s["value"]).split(" (")[0]
    return f"{s['assumption']} {value}" if s["assumption"] == "GEMM share of MAMF" else value


def per_reading(gated, value: str, fmt: str) -> str:
    """One clause per reading that holds: ``value`` in each scenario, formatted with ``fmt``."""
    return "; ".join(
        f"{reading}: " + ", ".join(f"{fmt.format(getattr(r, value))} ({r.scenario})" for r in g.itertuples())
        for reading, g in gated.groupby("reading", sort=False)
    )


def exposed_reduction(records, table, accumulations) -> dict:
    """The gradient reduction left exposed after the last micro-batch's backward at 25 MiB, at
    each number of micro-batches per step in ``accumulations``, under the reading that holds the
    article's figures and leaves the least exposed (the stated one where none holds): the floor
    it gives the step is the lowest, so the share a saving takes of it the highest, on the
    untuned network step 2 ran on: ``{"reading", "exposed_s": {m: seconds}}`` (B6 at scale reads
    it, ``flags.b6_claims``)."""
    holding = [r for r in READINGS if r["reading"] in set(table[table.holds].reading)] if len(table) else []
    base = B8_STATED["default_cap_mb"]
    by_reading = {
        reading["reading"]: {
            m: _steps(records, reading, B8_BUSBW_GBPS["before"], (base,), accumulation=m)[base][
                "exposed_comm_s"
            ]
            for m in accumulations
        }
        for reading in holding or READINGS[:1]
    }
    least = min(by_reading, key=lambda name: sum(by_reading[name].values()))
    return {"reading": least, "exposed_s": by_reading[least]}
