"""B5's rows measured here: torch.compile's step-time cut on this machine's model, and the cost
of graph breaks (a forced break in every block), each a toy regime off an 8B model on GPUs."""

from __future__ import annotations

from mfulab.studies.fusion import analysis, pointwise_chain, published
from mfulab.studies.fusion.stated import B5_STATED_SPEEDUP
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim


def b5_claims(records, t) -> list[Claim]:
    """Measured on every device; a verdict only on CUDA: the claim is about an 8B model's step
    on GPUs, and a CPU's small model is not its regime (never refuted or confirmed by it)."""
    ct = t["model_compile"].set_index("variant")
    if "compiled (default)" not in ct.index:
        return []
    r = ct.loc["compiled (default)"]
    breaks = "no graph break" if int(r.graphs_compiled) == 1 else f"{int(r.graphs_compiled)} graphs"
    gain = f"{breaks}; {analysis.compile_first_call(r)}"
    recompiled = records["compile"].get("recompiled_during_timing")
    if recompiled:
        gain += f"; {recompiled} graph(s) recompiled during the timed rounds"
    comp = records["compile"]
    on_gpu = records["device"] == "cuda"
    # where the profile did not compile the model with breaks, the chain's row tests the sentence
    chain_only = "compiled, graph break per block" not in ct.index and len(t.get("pointwise_chain", [])) > 0
    verdict = (
        verdicts.verdict_from_interval(r.speedup_lo, r.speedup_hi, threshold=B5_STATED_SPEEDUP[0])
        if on_gpu
        else "inconclusive on this machine"
    )
    why = "" if on_gpu else "; the claim's regime is an 8B model's step on GPUs, not a small model on a CPU"
    return [
        Claim(
            "B5",
            "torch.compile cuts step time by 8–12%",
            f"training step of {comp['preset']} (seq {comp['seq_len']}, micro-batch {comp['micro_batch']}), "
            f"eager vs compiled, {int(r.n)} interleaved rounds",
            verdict,
            f"speed-up {r.speedup_vs_eager:.2f}× [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}] "
            f"(threshold {B5_STATED_SPEEDUP[0]:.2f}×); {gain}{why}"
            + (f". Beside it, {context}" if (context := published.b5_published_context()) else ""),
            basis=verdicts.TOY,
        ),
        *_chain_rows(records, t),
        *([] if chain_only else [b5_graph_break_claim(ct, comp, on_gpu)]),
    ]


def _chain_rows(records, t) -> list[Claim]:
    """B5's mechanism sentences on the pointwise chain (``pointwise_chain``): the fuser's gain and
    the cost of many graph breaks, where this machine can show them; none without the chain."""
    chain = t.get("pointwise_chain")
    rows = [pointwise_chain.fuser_claim(chain, records), pointwise_chain.graph_break_claim(chain, records)]
    return [r for r in rows if r is not None]


def b5_graph_break_claim(ct, comp: dict, on_gpu: bool) -> Claim:
    """B5's second sentence, "graph breaks split the graph and can remove the gain", on the model
    compiled with a forced break in every block (``compile_graph_break``): shown (a toy regime)
    on CUDA when the broken model cannot reach the stated gain while the whole graph does, not
    shown when the broken model reaches it too, inconclusive otherwise and off CUDA; not
    checkable where the profile did not run the variant."""
    lo = B5_STATED_SPEEDUP[0]
    claim = "graph breaks (dynamic shapes, custom ops, control flow) split the graph and can erase the gain"
    if "compiled, graph break per block" not in ct.index:
        return Claim(
            "B5",
            claim,
            f"training step of {comp['preset']} compiled with a forced graph break in every block",
            "not checkable",
            "the variant was not run in this profile (compile_graph_break off: the cpu profile's time budget "
            "leaves a third compiled model out; the full and gpu profiles run it)",
            basis=verdicts.TOY,
        )
    r, g = ct.loc["compiled (default)"], ct.loc["compiled, graph break per block"]
    if not on_gpu:
        decision = "inconclusive on this machine"
    elif g.speedup_hi < lo <= r.speedup_lo:
        decision = "confirmed"
    elif g.speedup_lo >= lo:
        decision = "refuted"
    else:
        decision = "inconclusive on this machine"
    return Claim(
        "B5",
        claim,
        f"training step of {comp['preset']} compiled whole and with a forced graph break in every block, "
        f"each against eager, interleaved; shown when the broken model stays under the stated {lo:.2f}× "
        "while the whole graph reaches it",
        decision,
        f"whole graph {r.speedup_vs_eager:.2f}× [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}]; a break in every "
        f"block ({int(g.breaks_taken_per_step)} taken per step, {int(g.graphs_compiled)} graphs) "
        f"{g.speedup_vs_eager:.2f}× [{g.speedup_lo:.2f}, {g.speedup_hi:.2f}]"
        + (
            "" if on_gpu else "; the claim's regime is an 8B model's step on GPUs, not a small model on a CPU"
        ),
        basis=verdicts.TOY,
    )
