"""A15, optimizer offload (article A §5.2), at article A's own configuration.

Three sentences, one row each:

- the host link is "not in the same order of magnitude" as the card-to-card link: the datasheet
  ratio card-to-card ÷ host link per pairing (:func:`link_ratios`), a documented specification;
- overdoing offload turns training I/O-bound: the share of the article's 13B step (the course's
  step model at its launch command, ``step.step_time``) that the host transfers take (the I/O the
  sentence names: "搬运带宽和延迟"), for both readings of "offload the optimizer" over each host
  link (:func:`offload_table`), the host's Adam (CPU and DRAM work, not I/O) on a line of its own;
  an analysis at assumed configurations;
- "use it only when memory is just short": the author's own experience, not checkable.

Every input is a named constant of ``stated`` (``A15_*``) or ``devices.yaml``."""

from __future__ import annotations

import itertools

from mfulab.analytic import flops, parallel, step
from mfulab.analytic.config import preset
from mfulab.analytic.devices import device_spec
from mfulab.studies.parallelism import stated
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim
from mfulab.units import GB


def case_step(case: dict) -> tuple[float, float | None]:
    """The case's step in seconds and, where the article states a step of its own beside the
    model's, the MFU (PaLM's count) that stated step implies: the step model at the case's layout
    (article A's launch command; its 2.4 s is kept to be compared), or the step the article states
    where its numbers are consistent (article B's 9 s)."""
    if "layout" not in case:
        return case["step_s"], None
    # at the course's at-scale GEMM share, as the planner and chapter 04 price the same command
    assumed = stated.CLUSTER["assumptions"]
    modelled = step.step_time(preset(case["preset"]), **case["layout"], overlap=True, **assumed)
    implied_mfu = modelled["mfu_palm"] * modelled["step_s"] / case["article_step_s"]
    return modelled["step_s"], implied_mfu


def link_ratios():
    """Card-to-card over host-link bandwidth per pairing of ``stated.A15_LINK_PAIRS`` (per
    direction, datasheet figures): how many times faster the card's own link is."""
    import pandas as pd

    rows = []
    for device, host_link, article in stated.A15_LINK_PAIRS:
        card_bytes_per_s = device_spec(device).intra_node_bytes_per_s
        host_bytes_per_s = stated.A15_HOST_LINKS[host_link]
        sharing = stated.A15_CARDS_PER_HOST_UPLINK.get(device, 1)
        rows.append(
            {
                "device": device,
                "host_link": host_link,
                "article_device": article,
                "card_gb_per_s": card_bytes_per_s / GB,
                "host_gb_per_s": host_bytes_per_s / GB,
                "card_over_host": card_bytes_per_s / host_bytes_per_s,
                "cards_per_host_uplink": sharing,
                # every card offloading at once: the switch's uplink split between its cards
                "card_over_shared_host": card_bytes_per_s / (host_bytes_per_s / sharing),
            }
        )
    return pd.DataFrame(rows)


def _cases_by_batch() -> list[dict]:
    """``stated.A15_CASES`` with article A's case repeated at each of ``A15_GLOBAL_BATCHES``
    (the same command, fewer micro-batches): only the command's own batch is the stated case."""
    out = []
    for case in stated.A15_CASES:
        if "layout" not in case:
            out.append(case)
            continue
        for batch in stated.A15_GLOBAL_BATCHES:
            layout = {**case["layout"], "global_batch": batch}
            own = batch == case["layout"]["global_batch"]
            name = case["name"].replace(
                f"global batch {case['layout']['global_batch']}", f"global batch {batch}"
            )
            out.append({**case, "layout": layout, "stated": case["stated"] and own, "name": name})
    return out


def offload_table():
    """Optimizer offload per case of ``stated.A15_CASES`` (article A's own first): each card's
    bytes over its host link per step, each way, for the two readings (``parallel.offload_bytes_per_step``):
    Adam's moments moved in and out every step (the article's words: "move the first and second
    moments out of HBM and bring them back at each update") and ZeRO-Offload (gradients down,
    parameters up, Adam on the host, whose memory-bound time is added:
    ``A15_CPU_ADAM_BYTES_PER_PARAM`` at ``A15_HOST_MEMORY_BYTES_PER_S_PER_CARD`` × each share of
    ``A15_HOST_ADAM_BANDWIDTH_SHARES``, one row per share). The two directions run one after the
    other: the moments come back before the update and go out after it; ZeRO-Offload's gradients
    go down before the host's Adam and its parameters come up after it (no pipelining or one-step
    delay stated; until round thirty-one's reader of chapter 09 the larger direction alone was
    counted, as on a full-duplex link). The offload is serial to the step, so each share is of the
    step that contains it: ``io_share_of_step`` = transfers ÷ (the step model's step + transfers +
    host Adam), the quantity the sentence names; ``host_adam_share_of_step`` the host's Adam on
    the same step; ``share_of_step`` both together; ``io_share_of_article_step`` the transfers
    over the step the article states."""
    import pandas as pd

    rows = []
    for case in _cases_by_batch():
        shard_params = flops.param_count(preset(case["preset"])) / case["tp"]  # the card's TP shard
        step_s, implied_mfu = case_step(case)
        article_step_s = case.get("article_step_s", case.get("step_s"))
        cpu_adam_s = (
            shard_params
            / case["dp"]
            * stated.A15_CPU_ADAM_BYTES_PER_PARAM
            / stated.A15_HOST_MEMORY_BYTES_PER_S_PER_CARD
        )
        links = {k: stated.A15_HOST_LINKS[k] for k in case["links"]}
        links["card_to_card"] = device_spec(case["device"]).intra_node_bytes_per_s
        for mode in parallel.OFFLOAD_MODES:
            # the host Adam's share of the DRAM bandwidth, varied where the host runs Adam
            shares = stated.A15_HOST_ADAM_BANDWIDTH_SHARES if mode == "zero-offload" else (None,)
            for (link, link_bytes_per_s), share in itertools.product(links.items(), shares):
                o = parallel.offload_bytes_per_step(
                    shard_params, dp=case["dp"], mode=mode, host_link_bytes_per_s=link_bytes_per_s
                )
                host_s = cpu_adam_s / share if share else 0.0
                io_s = 2 * o["time_s"]  # out and back, one after the other
                with_offload_s = step_s + io_s + host_s
                rows.append(
                    {
                        "case": case["name"],
                        "stated": case["stated"],
                        "global_batch": case.get("layout", {}).get("global_batch"),
                        "mode": mode,
                        "link": link,
                        "host_adam_bandwidth_share": share,
                        "link_gb_per_s": link_bytes_per_s / GB,
                        "bytes_each_way": o["host_to_device_bytes"],
                        "transfer_s": io_s,
                        "host_adam_s": host_s,
                        "step_s": step_s,
                        "io_share_of_step": io_s / with_offload_s,
                        "host_adam_share_of_step": host_s / with_offload_s,
                        "share_of_step": (io_s + host_s) / with_offload_s,
                        "article_step_s": article_step_s,
                        "io_share_of_article_step": io_s / (article_step_s + io_s + host_s),
                        "article_step_mfu_palm": implied_mfu,
                    }
                )
    return pd.DataFrame(rows)


def _order_claim(ratios) -> Claim:
    """Two readings of 完全不在一个量级, decided on the article's own card (its 910B; the GPUs are
    context): the literal order of magnitude (≥ 10×, per card or with the uplink shared) and the
    idiom read as "not in the same order of magnitude once rounded", log10 of the ratio rounding
    to 1 or more: ≥ √10 ≈ 3.16× (``stated.A15_ROUNDED_ORDER``). Each reading is decided at the
    stated host link (``stated.A15_STATED_HOST_LINK``, our assumption) unless another generation
    of the link reverses it (``verdicts.at_stated_case``). Readings that disagree: not checkable."""
    article = ratios[ratios.article_device]
    at = article.set_index("host_link")
    stated_link = stated.A15_STATED_HOST_LINK
    others = [link for link in at.index if link != stated_link]
    order, rounded = stated.A15_ORDER_OF_MAGNITUDE, stated.A15_ROUNDED_ORDER

    def reached(link, line) -> bool:
        r = at.loc[link]
        return bool(max(r.card_over_host, r.card_over_shared_host) >= line)

    literal = verdicts.at_stated_case(reached(stated_link, order), [reached(k, order) for k in others])
    idiom = verdicts.at_stated_case(reached(stated_link, rounded), [reached(k, rounded) for k in others])
    # 卡间 in a thousand-card job also means card to card across nodes: the card's share of the
    # node's network (devices.yaml inter_node), which no threshold puts an order above PCIe
    card = article.device.iloc[0]
    network = device_spec(card).inter_node_bytes_per_s
    across = {link: network / r.host_gb_per_s / GB for link, r in at.iterrows()}
    inter = verdicts.at_stated_case(across[stated_link] >= rounded, [across[k] >= rounded for k in others])
    decision = literal if literal == idiom == inter else "not checkable"
    margins = ", ".join(
        f"{link} {r.card_over_host:.2f}× ({r.card_over_host / rounded - 1:+.1%} against √10)"
        for link, r in at.iterrows()
    )
    context = "; ".join(
        f"{r.device} {r.card_gb_per_s:.0f} vs {r.host_link} {r.host_gb_per_s:.1f} GB/s: "
        f"{r.card_over_host:.1f}×"
        + (
            f" ({r.card_over_shared_host:.0f}× with {r.cards_per_host_uplink} cards on one uplink)"
            if r.cards_per_host_uplink > 1
            else ""
        )
        for r in ratios[~ratios.article_device].itertuples()
    )
    return Claim(
        "A15",
        "the host link's bandwidth is not in the same order of magnitude as card-to-card links "
        "(完全不在一个量级)",
        f"card-to-card ÷ host-link bandwidth per direction on the article's {card} (devices.yaml's figure: "
        "approximate for the 910B, no vendor datasheet; PCI-SIG's for PCIe), at the host link we assume "
        f"({stated_link}) with the other generations "
        f"as its sensitivity; read literally (≥ {order:.0f}×) and as the idiom, orders of magnitude apart "
        f"once rounded (≥ √10 = {rounded:.2f}×); and card to card across nodes (the article's thousand-card "
        "setting): the card's share of the node's network against the same host links; readings that "
        "disagree leave it not checkable",
        decision,
        f"{card} {at.card_gb_per_s.iloc[0]:.0f} GB/s against "
        + ", ".join(f"{link} {r.host_gb_per_s:.1f} GB/s" for link, r in at.iterrows())
        + f": {margins}. Literally (≥ {order:.0f}×): {literal}; rounded (≥ {rounded:.2f}×): {idiom}"
        + (" (the host link's generation decides it)" if idiom == "analytic only" else "")
        + f". Read across nodes (the card's share of the node's network, {network / GB:.0f} GB/s): "
        + ", ".join(f"{link} {v:.2f}×" for link, v in across.items())
        + (f": {inter} against √10, and so against 10×" if inter == "refuted" else f": {inter} against √10")
        + (f". GPUs as context, not voted: {context}" if context else "")
        + "; latency has no datasheet figure here and is not judged",
        basis=verdicts.DOCUMENTED,
    )


def _batch_answer(rows, line: float, lower: float) -> str:
    """One global batch's answer: the stated reading (Adam's moments on the stated host link)
    decides unless another reading or the lower line reverses it (``verdicts.at_stated_case``)."""
    at = rows.set_index(["mode", "link"])
    stated_row = at.loc[("adam-moments", stated.A15_STATED_HOST_LINK)]
    assumed = [
        r
        for (mode, link), r in at.iterrows()
        if (mode, link) != ("adam-moments", stated.A15_STATED_HOST_LINK)
    ]
    # our line is an assumed input too: the lower line votes with every row beside the stated one's
    return verdicts.at_stated_case(
        stated_row.io_share_of_step >= line,
        [r.io_share_of_step >= line for r in assumed]
        + [r.io_share_of_step >= lower for r in rows.itertuples()],
    )


def _io_bound_claim(offload, copies=None) -> Claim:
    a = offload[offload.stated & (offload.link != "card_to_card")]
    at = a.set_index(["mode", "link"])
    stated_row = at.loc[("adam-moments", stated.A15_STATED_HOST_LINK)]
    line, lower = stated.A15_IO_BOUND_SHARE, stated.A15_IO_BOUND_SHARE_LOW
    # §5.2's sentence states no configuration: the 8-card launch command (§6.1) is borrowed, and it
    # neither offloads nor shards (DP 1), so every global batch is an assumed scenario and each votes
    # (verdicts.over_scenarios), each decided over its links and readings (verdicts.at_stated_case)
    article_a = offload[offload.global_batch.notna() & (offload.link != "card_to_card")]
    by_batch = {
        int(g): _batch_answer(rows, line, lower) for g, rows in article_a.groupby("global_batch", sort=False)
    }
    stated_batch = int(stated_row.global_batch)
    decision = verdicts.over_scenarios(
        [{"confirmed": True, "refuted": False}.get(answer) for answer in by_batch.values()]
    )
    worst_by_batch = article_a.groupby("global_batch", sort=False).io_share_of_step.max()
    batch_text = "the most any reading takes, by global batch of the borrowed command: " + (
        ", ".join(
            f"{int(g)}: {s:.0%} ({by_batch[int(g)]}"
            + ("; the command's own)" if int(g) == stated_batch else ")")
            for g, s in worst_by_batch.items()
        )
    )

    def where(r: dict) -> str:
        share = r["host_adam_bandwidth_share"]
        return f"{r['mode']} on {r['link']}" + (
            f" with host Adam at {share:.0%} of the DRAM bandwidth" if share == share and share else ""
        )

    at_lower = [where(r) for _, r in a.iterrows() if r.io_share_of_step >= lower]
    worst = a.loc[a.io_share_of_step.idxmax()]
    worst_article = a.loc[a.io_share_of_article_step.idxmax()]
    host = article_a.loc[article_a.host_adam_share_of_step.idxmax()]
    other = offload[
        offload.global_batch.isna() & (offload.link == "pcie4_x16") & (offload.mode == "adam-moments")
    ]
    ctx = other.iloc[0] if len(other) else None
    measured_copies = (
        ". No host–device link on a CPU: not measured here"
        if not copies
        else ". Measured on this GPU: pinned host → device "
        f"{copies['host_to_device_bytes_per_s'] / GB:.1f} GB/s, device → host "
        f"{copies['device_to_host_bytes_per_s'] / GB:.1f} GB/s, device → device "
        f"{copies['device_to_device_bytes_per_s'] / GB:.0f} GB/s"
    )
    return Claim(
        "A15",
        "overdoing optimizer offload turns training I/O-bound (开过头了会把训练变成 IO 密集型任务)",
        f"{stated_row.case}: the step model's step at the launch command; Adam's moments (8 B per parameter "
        "of the card's shard, out and back, one after the other) or ZeRO-Offload (2 B down and 2 B up, "
        "with host Adam between them at "
        + "/".join(f"{x:.0%}" for x in stated.A15_HOST_ADAM_BANDWIDTH_SHARES)
        + " of the host's DRAM bandwidth, assumed) over PCIe 3.0–5.0 "
        f"x16; I/O-bound = the host transfers at least {line:.0%} of the step that contains them, the I/O "
        f"at least the rest of the step (our line; {lower:.0%} votes beside it; the host's Adam is not "
        "I/O); §5.2 states no configuration and "
        "the borrowed command neither offloads nor shards (DP 1), so each global batch is an assumed "
        "scenario and the row is decided only where every one agrees (verdicts.over_scenarios)",
        decision,
        f"{batch_text}; at the command's batch, step {stated_row.step_s:.1f} s; moments "
        f"{stated_row.bytes_each_way / GB:.1f} GB each way per card, "
        f"{stated_row.transfer_s:.2f} s out and back on {stated.A15_STATED_HOST_LINK} "
        f"({stated_row.io_share_of_step:.1%}); the most, {where(worst)}: {worst.io_share_of_step:.1%}, "
        + (
            f"past the {lower:.0%} line only with {', '.join(at_lower)}"
            if at_lower
            else f"under a {lower:.0%} line too"
        )
        + ". At DP 1 nothing is sharded, "
        "so ZeRO-Offload (the whole optimizer on the host) is the most optimizer offload can move. "
        f"Even at the article's {stated_row.article_step_s:.1f} s (an MFU of "
        f"{stated_row.article_step_mfu_palm:.2f} by PaLM's count: impossible, see A19) the most is "
        f"{worst_article.io_share_of_article_step:.0%}. The host's Adam is CPU and DRAM work, not I/O: "
        f"at most {host.host_adam_share_of_step:.0%} of a step ({where(host)}, global batch "
        f"{int(host.global_batch)}), a CPU-bound step where it is slow, not an I/O-bound one"
        + (
            f". Article B's 7B (TP 4, states sharded over DP 16): {ctx.io_share_of_step:.1%} of its 9 s step"
            if ctx is not None
            else ""
        )
        + measured_copies,
        basis=verdicts.ASSUMED,
    )


def a15_claims(offload, ratios, copies=None) -> list[Claim]:
    """A15's three sentences: the link ratio (documented specification), the I/O-bound step
    (analysis at assumed configurations: the 8-card command borrowed), the advice (the article's
    words alone)."""
    return [
        _order_claim(ratios),
        _io_bound_claim(offload, copies),
        Claim(
            "A15",
            "use offload only when memory is just short and the batch must not shrink",
            "the author's own experience (我个人的经验)",
            "not checkable",
            "a preference with no stated alternative or size; the two rows above give what offload costs",
            basis=verdicts.STATEMENT,
        ),
    ]
