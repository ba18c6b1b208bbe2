"""The claims of the ``parallelism`` study: :func:`outcome` builds the tables once (measured here
by ``measured``, at the articles' scale by ``planner_at_scale``), composes the rows ``analysis``
builds from them, and the headline metrics; the notebook and ``make stability`` call it."""

from __future__ import annotations

from mfulab.results import run_identity
from mfulab.studies.parallelism import (
    a10_rows,
    analysis,
    b10_scale,
    measured,
    memory_rows,
    offload,
    planner_at_scale,
)
from mfulab.studykit import verdicts
from mfulab.studykit.outcome import Outcome


def tables(records) -> dict:
    """Every table the claims and the notebook read (saved as ``tables/<name>.csv``)."""
    return {
        "pipeline": measured.pipeline_table(records),
        "pipeline_memory": measured.pipeline_memory_table(records),
        "sharding": measured.sharding_table(records),
        "tensor": measured.tensor_table(records),
        "exchange": measured.exchange_table(records),
        "skew": measured.skew_table(records),
        "a10_traffic": planner_at_scale.a10_traffic_table(),
        "a10_placement": planner_at_scale.a10_placement(),
        "a12_planner": planner_at_scale.a12_planner_table(),
        "a13_interleaving": planner_at_scale.a13_interleaving_table(),
        "a13_m_sweep": planner_at_scale.a13_m_sweep(),
        "a15_offload": offload.offload_table(),
        "a15_link_ratios": offload.link_ratios(),
        "planner_answers": planner_at_scale.planner_answers(),
        "planner_sensitivity": planner_at_scale.planner_sensitivity(),
        "b10_scale": b10_scale.b10_scale_table(),
        "b10_bytes": b10_scale.b10_byte_table(),
    }


def outcome(records, p) -> Outcome:
    """The tables, the claims rows (A10, A11, A12, A13, A15, B10) and the headline metrics,
    each computed once."""
    t = tables(records)
    claim_list = [
        *a10_rows.a10_claims(t["a10_traffic"], t["a10_placement"]),
        *analysis.a11_claims(t["tensor"]),
        *analysis.a12_claims(t["sharding"], t["a12_planner"]),
        *analysis.a13_claims(t["pipeline"], t["a13_interleaving"], t["a13_m_sweep"]),
        *memory_rows.pipeline_memory_claim(t["pipeline_memory"]),
        *offload.a15_claims(t["a15_offload"], t["a15_link_ratios"], records.get("copy_bandwidths")),
        *analysis.b10_claims(t["exchange"], t["skew"]),
        b10_scale.b10_scale_claim(t["b10_scale"], byte_table=t["b10_bytes"]),
    ]
    return Outcome(claim_list, headline_metrics(records, t, claim_list), t)


def headline_metrics(records, t: dict, claim_list) -> dict:
    """What ``metrics.json`` carries for comparisons across machines (units in the names)."""
    sh = t["sharding"]
    one = sh[sh.m == sh.m.min()].set_index("config")
    tp = t["tensor"].set_index("layout")
    gates = [*sh.gradient_gate, *t["tensor"].max_abs_diff, *t["pipeline"].gradient_gate.dropna()]
    return {
        **run_identity(records),
        "bubble_model_max_rel_error": float(
            t["pipeline"][t["pipeline"].compute == "emulated"].model_error.abs().max()
        ),
        "zero3_traffic_over_ddp": float(
            one.loc["fsdp_full", "traffic_elements"] / one.loc["ddp", "traffic_elements"]
        ),
        "sharded_state_bytes_share": float(one.loc["fsdp_full", "held_bytes"] / one.loc["ddp", "held_bytes"]),
        "sequence_parallel_saved_share": float(tp.loc["tp+sp", "saved_bytes"] / tp.loc["tp", "saved_bytes"]),
        "all_to_all_over_all_reduce": float(t["exchange"].ratio.iloc[-1]),
        "parallel_gradient_gate_max_abs_diff": float(max(gates)),  # not buckets' gate: another quantity
        "claims": verdicts.records(claim_list),
    }
