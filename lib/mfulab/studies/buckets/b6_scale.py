"""B6 at article B's scale: the most ``gradient_as_bucket_view`` and ``static_graph`` can save in
its 7B run (``stated.B6_ARTICLE``), the gradient copy the first avoids priced at the step model's
memory rate, with its sensitivity to that rate's achieved share of the datasheet bandwidth."""

from __future__ import annotations

from mfulab.analytic.articles import B_RUN
from mfulab.analytic.config import preset
from mfulab.analytic.published_batches import MIN_TOKENS_PER_STEP_7B_70B
from mfulab.studies.buckets.graph_nodes import search_bound_at_scale
from mfulab.studies.buckets.simulator import model_layout
from mfulab.studies.buckets.stated import B6_ARTICLE, B6_MEMORY_EFFICIENCIES, B6_SEVERAL_PERCENT_RATIO
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim
from mfulab.units import GB, TERA

# the gradient copies gradient_as_bucket_view avoids: the copy back (copy_bucket_to_grad); the copy
# in becomes an in-place division (reducer.cpp)
COPIES_AVOIDED = 1


def copy_bound_s(grad_bytes: float, bandwidth_bytes_per_s: float, ranks_sharing: int) -> float:
    """The gradient copy ``gradient_as_bucket_view`` avoids (the copy back, ``copy_bucket_to_grad``;
    the scaled copy in becomes an in-place division of the same bytes, reducer.cpp): a read and a
    write of ``grad_bytes`` at ``bandwidth / ranks_sharing`` (a host's ranks share its memory)."""
    moved_bytes = COPIES_AVOIDED * 2.0 * grad_bytes
    bandwidth_per_rank = bandwidth_bytes_per_s / ranks_sharing
    return moved_bytes / bandwidth_per_rank


# article B's §5 run: 512 sequences on 16 data-parallel ranks at micro-batch 1 (assumed, as B8)
B6_ARTICLE_MICRO_BATCHES = 32
B6_MICRO_BATCH_SCENARIOS = (32, 4, 1)  # the sentence (§2.2) names no batch: the run's and fewer


def article_bound(memory_efficiency: float | None = None) -> dict:
    """The copy bound at the article's scale (``stated.B6_ARTICLE``): the largest share of the
    9.0 s step that the copy ``gradient_as_bucket_view`` avoids could take, at the step model's
    memory rate for the card (``rates.machine_rates``; ``memory_efficiency`` overrides its
    achieved share of the datasheet bandwidth)."""
    from mfulab.analytic.rates import Assumptions, machine_rates

    a = B6_ARTICLE
    assumptions = (
        Assumptions() if memory_efficiency is None else Assumptions(memory_efficiency=memory_efficiency)
    )
    rates = machine_rates(a["device"], dtype="bf16", assumptions=assumptions)
    params = sum(n for _, n in model_layout(preset(a["preset"])))
    per_gpu = params / a["tp"]  # TP shards the weight matrices (the norms, a rounding, are not)
    copy_s = copy_bound_s(per_gpu * a["grad_bytes_per_param"], rates.memory_bytes_per_s, 1)
    return {
        "params": params,
        "per_gpu": per_gpu,
        "memory_efficiency": assumptions.memory_efficiency,
        "hbm_bytes_per_s": rates.memory_bytes_per_s,
        "copy_s": copy_s,
        "step_s": a["step_s"],
        "share": copy_s / a["step_s"],
    }


def at_scale_claim(records, exposed_s: dict | None = None) -> Claim:
    """ "Together the two flags save several percent" at article B's scale: refuted (analysis)
    where the copy bound stays under 3% at every micro-batch count and every achieved share of the
    datasheet bandwidth, analytic only where one reaches it (the bound is an upper bound: reaching
    3% makes the claim possible, not shown). ``exposed_s``: the exposed gradient reduction's lower
    bound per number of micro-batches (``b8_case.b6_exposed_reduction``)."""
    a = article_bound()
    several = B6_SEVERAL_PERCENT_RATIO - 1
    search = search_bound_at_scale(records)
    saved_s = a["copy_s"]  # the article's call sets no find_unused_parameters: no search to skip
    searched_s = saved_s + (search["share"] * a["step_s"] if search else 0.0)  # with it: not voted
    # "can save" (可以, a possibility over large-scale training: any_scenario) at the §5 run's 32
    # micro-batches and fewer, each a published batch at enough DP ranks; each share is an upper
    # bound (step ≥ its compute scaled down, ≥ B8's least exposed reduction ÷ (1 + margin))
    exposed = exposed_s or {}
    reading, exposed_s = exposed.get("reading"), exposed.get("exposed_s", {})
    floor_s = {
        m: max(a["step_s"] * m / B6_ARTICLE_MICRO_BATCHES, exposed_s.get(m, 0.0))
        for m in B6_MICRO_BATCH_SCENARIOS
    }
    per_m = {m: saved_s / floor_s[m] for m in B6_MICRO_BATCH_SCENARIOS}
    # the same bound at each achieved share of the datasheet bandwidth (stated.B6_MEMORY_EFFICIENCIES)
    by_efficiency = {
        e: {m: article_bound(e)["copy_s"] / floor_s[m] for m in B6_MICRO_BATCH_SCENARIOS}
        for e in B6_MEMORY_EFFICIENCIES
    }
    searched = {m: searched_s / floor_s[m] for m in B6_MICRO_BATCH_SCENARIOS}
    tokens = {m: B_RUN["tokens_per_step"] * m / B6_ARTICLE_MICRO_BATCHES for m in B6_MICRO_BATCH_SCENARIOS}
    dp = B_RUN["n_devices"] // B6_ARTICLE["tp"]  # the §5 run's DP width
    ranks = {m: max(dp, MIN_TOKENS_PER_STEP_7B_70B / (tokens[m] / dp)) for m in B6_MICRO_BATCH_SCENARIOS}
    decision = verdicts.any_scenario(
        [False if v < several else None for shares in by_efficiency.values() for v in shares.values()]
    )
    return Claim(
        "B6",
        "together the two flags save several percent at scale",
        f"the mechanisms' bound for article B's 7B case ({a['step_s']:g} s steps, TP "
        f"{B6_ARTICLE['tp']} on {B6_ARTICLE['device']}) and at fewer micro-batches per step; 'several "
        f"percent' read as ≥ {several:.0%}; a possibility (可以): refuted (analysis) where every "
        "bound is under it",
        decision,
        f"the gradient copy gradient_as_bucket_view avoids (the copy back to .grad; the copy in becomes "
        f"an in-place division): {a['per_gpu'] / 1e9:.2f} "
        f"billion fp32 gradients per GPU "
        f"({a['per_gpu'] * B6_ARTICLE['grad_bytes_per_param'] / GB:.1f} GB), "
        f"each read and written, at {a['hbm_bytes_per_s'] / TERA:.3f} TB/s (the step model's "
        f"{a['memory_efficiency']:g} of the datasheet): {a['copy_s'] * 1e3:.0f} ms, "
        f"≤ {a['share']:.2%} of the step; static_graph saves a graph search only with "
        "find_unused_parameters=True, which the article's call (§2.2's code) leaves False: nothing "
        "to skip, so the bound is the copy"
        + (
            f". Context, not voted (another configuration than the article's): with the search, "
            f"static_graph skips a walk of the 7B's {search['article_nodes']:,} autograd nodes, which a "
            f"Python walk does here in {search['walk_s'] * 1e3:.1f} ms ({search['per_node_s'] * 1e6:.1f} "
            f"µs a node; DDP's C++ walk is faster): ≤ {search['share']:.2%} of the step, together "
            f"≤ {a['share'] + search['share']:.2%}, "
            + ", ".join(f"{v:.1%} at {m}" for m, v in searched.items())
            + " micro-batches"
            if search
            else ""
        )
        + ". With fewer micro-batches per step the same saving weighs more: at most "
        + ", ".join(
            f"{v:.1%} at {m} (a published batch, ≥ {MIN_TOKENS_PER_STEP_7B_70B / 1e6:g}M tokens, at "
            f"{ranks[m]:,.0f}+ DP ranks)"
            for m, v in per_m.items()
        )
        + " micro-batches per step (every count votes: the sentence is about large-scale training in "
        "general; upper bounds, at the run's DP 16 where the reduction left exposed is the least: the "
        "step at least its compute scaled down"
        + (
            ", and at least the gradient reduction left exposed after the last micro-batch, "
            + ", ".join(f"{exposed_s[m]:.2f} s at {m}" for m in B6_MICRO_BATCH_SCENARIOS if m in exposed_s)
            + f" (the simulator's at 25 MiB under the reading B8 keeps that leaves the least, {reading}, "
            "on the untuned network, divided by 1 + the step model's margin)"
            if exposed_s
            else ""
        )
        + ")"
        + ". At each achieved share of the datasheet bandwidth the largest bound: "
        + ", ".join(f"{max(v.values()):.1%} at {e:g}" for e, v in by_efficiency.items())
        + f" (refuted only where every one stays under {several:.0%})"
        + ". Article B's run is ZeRO-2, where DDP's flags do not apply",
        basis=verdicts.ASSUMED,  # the micro-batches per step and find_unused_parameters: unstated
    )
