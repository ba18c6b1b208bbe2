"""Published nccl-tests all-reduce figures on GPU systems (``analytic.nccl_published``, the one list
chapter 10 reads too, each row with its source), set beside this machine's gloo benchmark: what
the same benchmark reads on NVLink and InfiniBand, as a share of each fabric's line rate (a ring's;
an NVLS row is an algorithm's gain, not a share: the list's one NVLS rule)."""

from __future__ import annotations

import re

from mfulab.analytic.devices import device_spec
from mfulab.analytic.nccl_published import NCCL_TESTS_PUBLISHED, NVLS, share_of_line
from mfulab.studies.overlap.analysis import collectives_table
from mfulab.studies.overlap.stated import B9_COMMAND, B9_NVLINK, B9_STATED, B9_TWO_NODE, B16_ENV_BLOCK
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim
from mfulab.units import GB, si


def published_nccl_tests_table(records):
    """The published rows, with the share of each fabric's line rate (``busbw_over_line``: a
    ring's; empty for an NVLS row, whose in-switch reduction is no share of a link), the largest
    message of each sweep, its NCCL version and year, and how many times this run's largest
    all-reduce busbw each one is (``times_this_machine``)."""
    import pandas as pd

    d = collectives_table(records).query("op == 'all_reduce'").sort_values("size_bytes")
    here_gb_per_s = float(d.busbw_bytes_per_s.iloc[-1]) / GB
    rows = [
        {**r, "busbw_over_line": share_of_line(r), "times_this_machine": r["busbw_gb_per_s"] / here_gb_per_s}
        for r in NCCL_TESTS_PUBLISHED
    ]
    columns = ["system", "fabric", "algorithm", "busbw_gb_per_s", "line_gb_per_s", "busbw_over_line"]
    columns += ["largest_message", "nccl_version", "year", "figure", "times_this_machine"]
    return pd.DataFrame(rows)[[*columns, "source"]]


def b9_command_claim() -> Claim:
    """Article B's reading of its nccl-tests command, against nccl-tests' own documentation
    (``stated.B9_COMMAND``): refuted when the command's GPU count is not the article's."""
    c = B9_COMMAND
    gpus = c["g"] * c["t"]
    return Claim(
        "B9",
        "`all_reduce_perf ... -g 8 -t 2` runs 8 GPUs for 2 rounds; its busbw is the algorithm bandwidth",
        "the command's flags and nccl-tests' bandwidth definitions (its README and PERFORMANCE.md)",
        verdicts.verdict_from_agreement(gpus == c["article_gpus"]),
        f"-t is threads per process and -g GPUs per thread: one process drives {c['t']} × {c['g']} = "
        f"{gpus} GPUs (a 16-GPU node), not {c['article_gpus']} for {c['article_rounds']} rounds (rounds are "
        "-n and -w); busbw = algbw × 2(n−1)/n for all_reduce, the bus figure, not the algorithm bandwidth",
        basis=verdicts.DOCUMENTED,
    )


def _ring_nvlink_node(r: dict) -> bool:
    """A published single-node NVLink ring row: a healthy node of 8 whose busbw is a share of its
    link (an NVLS row is not: the list's one NVLS rule)."""
    return "NVLink" in r["fabric"] and r["scope"] == "node" and r["algorithm"] != NVLS


def largest_message_bytes(r: dict) -> float | None:
    """The largest message a published sweep ran, from its ``largest_message`` text ("512 MB",
    "4 GiB", ...); None where the source states no size ("large messages": a maintainer's figure
    for the plateau)."""
    m = re.match(r"\s*([\d.]+)\s*(KiB|MiB|GiB|KB|MB|GB)\b", r["largest_message"])
    if not m:
        return None
    unit = {"KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    return float(m.group(1)) * unit[m.group(2)]


def reaches_article_range(r: dict) -> bool:
    """Whether a published sweep reached the sizes article B's own command sweeps
    (``stated.B9_NVLINK['article_min_bytes']``): where it stopped below, its busbw is a lower bound
    of the node's (busbw still rises with the message there), not a reading at the article's sizes."""
    size = largest_message_bytes(r)
    return size is None or size >= B9_NVLINK["article_min_bytes"]


def _healthy_nvlink_rows(at_article_range: bool | None = None):
    """The published single-node NVLink ring rows, as (system and largest message, busbw ÷ line);
    with ``at_article_range`` True (False) only those whose sweep did (did not) reach the article's
    sizes."""
    return [
        (f"{r['system']}, to {r['largest_message'].split(' (')[0]}", r["busbw_gb_per_s"] / r["line_gb_per_s"])
        for r in NCCL_TESTS_PUBLISHED
        if _ring_nvlink_node(r) and (at_article_range is None or reaches_article_range(r) == at_article_range)
    ]


def _nvls_rows():
    """The published NVLS rows, as (system, busbw ÷ line): above 100% where the switch reduces."""
    return [
        (r["system"], r["busbw_gb_per_s"] / r["line_gb_per_s"])
        for r in NCCL_TESTS_PUBLISHED
        if r["algorithm"] == NVLS
    ]


def best_per_generation() -> dict:
    """Each GPU generation's best published healthy single-node ring reading, ``{gpu: (system,
    busbw ÷ line)}``: what its NVLink reaches when nothing is wrong."""
    best = {}
    for r in filter(_ring_nvlink_node, NCCL_TESTS_PUBLISHED):
        share = r["busbw_gb_per_s"] / r["line_gb_per_s"]
        if share > best.get(r["gpu"], (None, 0.0))[1]:
            best[r["gpu"]] = (r["system"], share)
    return best


def b9_nvlink_claims() -> list[Claim]:
    """B9's two NVLink sentences against the datasheet and published nccl-tests runs
    (``stated.B9_NVLINK``, ``nccl_published.NCCL_TESTS_PUBLISHED``): (1) 25 GB/s one way as an A100's
    NVLink figure, refuted when the card's figure (devices.yaml) is not 25 GB/s; (2) "busbw at 60%
    of the NVLink figure means an intra-node bottleneck". Its quantity has two readings: the
    article's own (busbw ÷ 25 GB/s × 2, refuted in the row before), under which 60% is 7.5 GB/s
    and true of any node that low, and the card's line rate. Read against the line rate, against
    what each GPU generation's NVLink reaches when healthy (its best published reading):
    refuted when a published healthy node reads at or below 60%; confirmed when 60% lies below
    every healthy reading, the weakest included, by at least ``decisive_margin`` (published busbw
    moves by tens of percent with the message size, which the sentence does not state: a rule
    that flags a node must not sit within that margin of a node that works); otherwise not
    checkable (reading-dependent). Each generation's best is reported beside it."""
    c = B9_NVLINK
    card_gb_per_s = device_spec("a100").intra_node_bytes_per_s / GB
    a100 = NCCL_TESTS_PUBLISHED[0]
    healthy = _healthy_nvlink_rows(at_article_range=True)
    truncated = _healthy_nvlink_rows(at_article_range=False)
    best = best_per_generation()
    article_reading = a100["busbw_gb_per_s"] / c["article_card_gb_per_s"] * 2
    below_all = all(share > c["bottleneck_share"] for _, share in healthy + truncated)
    margins = {g: 1 - c["bottleneck_share"] / share for g, (_, share) in best.items()}
    lowest_system, lowest = min(healthy, key=lambda row: row[1])
    lowest_margin = 1 - c["bottleneck_share"] / lowest
    # the other reading: any size of the article's sweep (-b 128M upward), where a sweep that
    # stopped below 1 GB still read inside it (nccl-tests issue 149's A100 node, 67% at 512 MB)
    in_sweep_system, in_sweep = min(healthy + truncated, key=lambda row: row[1])
    in_sweep_margin = 1 - c["bottleneck_share"] / in_sweep
    if not below_all:
        sixty_verdict = "refuted"
    elif min(lowest_margin, in_sweep_margin) >= c["decisive_margin"]:
        sixty_verdict = "confirmed"
    else:
        sixty_verdict = "not checkable"  # the plateau's reading and the sweep's disagree
    return [
        Claim(
            "B9",
            "an A100's theoretical NVLink 3.0 bandwidth is 25 GB/s one way",
            "NVIDIA's A100 figures (devices.yaml; the A100 architecture whitepaper: 12 links) against a "
            "published 8-GPU all_reduce_perf",
            verdicts.verdict_from_agreement(abs(card_gb_per_s - c["article_card_gb_per_s"]) < 0.5),
            f"{c['link_gb_per_s']:g} GB/s is one link per direction; an A100 has {c['links_per_a100']}: "
            f"{card_gb_per_s:.0f} GB/s per direction. A healthy node's {a100['busbw_gb_per_s']:.0f} GB/s "
            f"busbw (nccl-tests issue 149) is {a100['busbw_gb_per_s'] / card_gb_per_s:.0%} of "
            f"{card_gb_per_s:.0f} GB/s; "
            f"÷ 25 GB/s × 2 as the article reads it: {article_reading:.0%} (impossible)",
            basis=verdicts.DOCUMENTED,
        ),
        Claim(
            "B9",
            "a node of 8 whose busbw is only 60% of the theoretical NVLink has an intra-node bottleneck",
            "busbw ÷ line rate of published healthy single-node all_reduce_perf runs (the NVLink ring rows "
            "of the table above) at the sizes article B's own command sweeps (-b 128M -e 8G), read two "
            "ways: at the sweep's plateau (only sweeps that reached 1 GB; one that stopped below is a lower "
            "bound there) and at any size of it (128 MB up); decided only where 60% lies below every "
            f"reading of both, the weakest included, by {c['decisive_margin']:.0%} or more",
            sixty_verdict,
            ("reading-dependent: " if sixty_verdict == "not checkable" else "")
            + "healthy nodes read "
            + ", ".join(f"{share:.0%} ({system})" for system, share in healthy)
            + f": 60% lies below {'all' if below_all else 'not all'} of them; below each generation's "
            "best by "
            + ", ".join(f"{margins[g]:.0%} ({g})" for g in best)
            + f"; 60% lies {lowest_margin:.0%} below the weakest healthy reading, {lowest:.0%} "
            f"({lowest_system}), {'beyond' if lowest_margin >= c['decisive_margin'] else 'inside'} the "
            f"{c['decisive_margin']:.0%} margin, at the plateau; at any size of the article's sweep the "
            f"weakest is {in_sweep:.0%} ({in_sweep_system}), 60% lies {in_sweep_margin:.0%} below it, "
            f"{'beyond' if in_sweep_margin >= c['decisive_margin'] else 'inside'} the margin"
            + "; NVLS readings, an in-switch reduction's gain and no share of the link, are left out: "
            + ", ".join(f"{share:.0%} ({system})" for system, share in _nvls_rows())
            + f"; read against the card's {card_gb_per_s:.0f} GB/s. Against the article's own 25 GB/s × 2, "
            f"60% is {c['bottleneck_share'] * c['article_card_gb_per_s'] / 2:.1f} GB/s of busbw, "
            f"{c['bottleneck_share'] * c['article_card_gb_per_s'] / 2 / a100['busbw_gb_per_s']:.0%} of a "
            "healthy A100 node: true of any node that low, blind to every milder bottleneck",
            basis=verdicts.PUBLISHED,
        ),
    ]


def b9_two_node_claim() -> Claim:
    """Article B's two-node rule (``stated.B9_TWO_NODE``) against healthy published two-node paths,
    each over a healthy A100 node's busbw: nccl issue 1048's two nodes of 8 A100 over the same
    cluster's one node (the article's own configuration), and the InfiniBand cluster of
    ``nccl_published`` over its first row. A two-node all-reduce is bounded by the NICs each
    node has, one node's by NVLink, so the ratio is the two fabrics' ratio before it is the path's
    health. Decided on the article's own figures: its two nodes after its fix (21 GB/s, 84% of its
    25 GB/s per node: a working path by the article's own account) over a healthy A100 node (the
    weakest published one-node reading, ``nccl_published``): refuted (the article's own
    arithmetic) when that reads under the rule's share by ``B9_NVLINK``'s decisive margin, so the
    rule flags the path the article calls fixed; otherwise not checkable. The published two-node
    paths (issues 1048 and 119, whose health their threads leave open) are context, not voted."""
    rule, margin = B9_TWO_NODE["rule_share"], B9_NVLINK["decisive_margin"]
    decisive = rule * (1 - margin)
    node = NCCL_TESTS_PUBLISHED[0]
    ib = next(r for r in NCCL_TESTS_PUBLISHED if "InfiniBand" in r["fabric"] and r["scope"] == "nodes")
    pair = next(r for r in NCCL_TESTS_PUBLISHED if "one_node_busbw_gb_per_s" in r)
    fixed_gb_per_s = B9_STATED["busbw_after_bytes_per_s"] / GB
    link_gb_per_s = B9_STATED["link_bytes_per_s"] / GB
    published = {
        f"{pair['system']} over its own one node ({pair['fabric']}, nccl issue 1048)": (
            pair["busbw_gb_per_s"],
            pair["one_node_busbw_gb_per_s"],
        ),
        f"{ib['system']} ({ib['fabric']}, issue 119) over the A100 node of issue 149": (
            ib["busbw_gb_per_s"],
            node["busbw_gb_per_s"],
        ),
    }
    flagged = {k: two / one for k, (two, one) in published.items()}
    weakest_node_gb_per_s = min(
        r["busbw_gb_per_s"] for r in NCCL_TESTS_PUBLISHED if r["gpu"] == "A100" and r["scope"] == "node"
    )
    own = fixed_gb_per_s / weakest_node_gb_per_s  # the article's fixed two nodes over a healthy node
    # the NIC bandwidth per node below which a path working at the IB row's share of its line
    # reads under the rule's share of a healthy node
    ib_share = ib["busbw_gb_per_s"] / ib["line_gb_per_s"]
    break_even_gb_per_s = rule * node["busbw_gb_per_s"] / ib_share
    return Claim(
        "B9",
        "two nodes of 8 whose busbw is under half of one node's: most likely the IB NIC or the GDR path "
        "is not in effect",
        "the article's two nodes after its fix (its own figures) over the weakest healthy published A100 "
        f"node; refuted when that reads under {rule:.0%} by the margin of the row before ({margin:.0%}: "
        f"under {decisive:.0%}), so the rule flags the path the article calls fixed; else not checkable",
        "refuted" if own < decisive else "not checkable",
        f"the article's two nodes after its fix: {fixed_gb_per_s:.0f} GB/s, "
        f"{fixed_gb_per_s / link_gb_per_s:.0%} of its {link_gb_per_s:.0f} GB/s per node (a working path, by "
        f"its own account), over a healthy A100 node's {weakest_node_gb_per_s:.0f} GB/s: {own:.0%}. "
        "Published two-node paths, context (their threads leave the paths' health open): "
        + "; ".join(
            f"{k}: {published[k][0]:.0f} of {published[k][1]:.0f} GB/s, {v:.0%}"
            + (" (within the margin)" if v >= decisive else "")
            for k, v in flagged.items()
        )
        + f". Both read near their ports' line rate (issue 1048's at "
        f"{pair['busbw_gb_per_s'] / pair['line_gb_per_s']:.0%} of its {pair['line_gb_per_s']:.0f} GB/s of "
        f"ports, issue 119's at {ib_share:.0%}), as a working path would: a two-node all-reduce is bounded "
        "by each node's NICs, one node's by NVLink, so the ratio is the fabrics' before the path's health. "
        "(The article's 25 GB/s per node reads as one 200 Gb/s NIC per node.) "
        "A working path reads under half of a healthy A100 node wherever a node's NICs carry under "
        f"{break_even_gb_per_s:.0f} GB/s per direction; with 8 HDR ports per node (200 GB/s, DGX-class) a "
        f"path at issue 119's share reads {ib_share * 200 / node['busbw_gb_per_s']:.0%} of a healthy node, "
        "and the rule holds there. The verdict rests on the article's own words: its fixed path reads "
        "21 GB/s 'close to the 25 GB/s physical limit' (接近25GB/s的物理上限), which sets the node's network "
        "at 25 GB/s whatever its port count, so the rule flags the article's own working path. Compare "
        "two-node busbw with the NICs' line rate instead",
        basis=verdicts.PUBLISHED,  # published node and path figures, at the article's NIC reading
    )


def nccl_tests_text(rows) -> str:
    """This run's benchmark in nccl-tests' columns (``comm.nccl_tests_table``), each row with the
    quartiles of its timed calls beside the median: small messages on a CPU are noise-dominated
    (a 1 KiB call can read slower than a 2 KiB one), and the spread says by how much."""
    from mfulab.analytic import comm

    lines = comm.nccl_tests_table(rows).split("\n")
    out = [f"{lines[0]} {'q1–q3(us)':>17}"]
    for line, r in zip(lines[1:], rows):
        spread = f"{r['q1_s'] * 1e6:.1f}–{r['q3_s'] * 1e6:.1f}" if "q1_s" in r else "n/a"
        out.append(f"{line} {spread:>17}")
    return "\n".join(out)


STALL_RATIO = 2.0  # a size whose median is this many times its lower quartile: most samples stalled


def stalled_sizes_text(rows) -> str:
    """The sizes whose samples are bimodal (median ≥ :data:`STALL_RATIO` × the lower quartile:
    more than half the samples took a stall the fast quarter did not), per collective, with the
    extra time of the median over the lower quartile, as a sentence for the busbw figure."""
    stalled = [r for r in rows if r["q1_s"] > 0 and r["time_s"] >= STALL_RATIO * r["q1_s"]]
    if not stalled:
        return "No size's median is twice its lower quartile in this run: no bimodal size."
    parts = [
        f"{r['op']} at {si(r['size_bytes'], 'B')} "
        f"(+{(r['time_s'] - r['q1_s']) * 1e3:.1f} ms over the lower quartile)"
        for r in stalled
    ]
    return (
        f"Bimodal sizes in this run (median at least {STALL_RATIO:g}× the lower quartile): "
        + "; ".join(parts)
        + ". Such a size's dip in busbw is a stall, not a property of the size."
    )


def b16_env_claims() -> list[Claim]:
    """Article B §3.2's environment block (``stated.B16_ENV_BLOCK``), line by line against the
    documentation of the library that reads each variable: a variable nothing reads is refuted;
    lines whose effect the article states no measurement for are not checkable."""
    e = B16_ENV_BLOCK
    return [
        Claim(
            "B16",
            f"`export {e['debug_variable_written']}=1` belongs in the measured NCCL/PyTorch environment",
            "the variables PyTorch's torch.distributed reads (its documentation)",
            "refuted",
            f"PyTorch reads {e['debug_variable_read']}=OFF|INFO|DETAIL for torch.distributed's debug checks; "
            f"{e['debug_variable_written']} is not a variable any library here reads, so the line sets "
            f"nothing (the intended one, {e['debug_variable_read']}=DETAIL, adds collective checks that "
            "cost time: a debugging setting, not a tuning one)",
            basis=verdicts.DOCUMENTED,
        ),
        *_b16_buffer_rows(e),
        *_b16_network_rows(e),
    ]


def _b16_buffer_rows(e: dict) -> list[Claim]:
    """The block's buffer and stream lines, one verdict per statement: NCCL_BUFFSIZE's memory (what
    the variable sets, by NCCL's documentation: confirmed), its "more stable" (no mechanism, no
    measurement: not checkable), and CUDA_DEVICE_MAX_CONNECTIONS (no reason given: not checkable)."""
    times = e["nccl_buffsize_bytes"] / e["nccl_buffsize_default_bytes"]
    return [
        Claim(
            "B16",
            f"NCCL_BUFFSIZE={e['nccl_buffsize_bytes']}: a larger buffer takes more memory",
            "NCCL's environment-variable documentation",
            "confirmed",
            f"the buffer is NCCL's staging buffer per channel between two GPUs, default "
            f"{e['nccl_buffsize_default_bytes'] / 2**20:g} MiB: {e['nccl_buffsize_bytes'] / 2**20:g} MiB "
            f"is {times:g}× the memory per channel and peer, as the variable is documented",
            basis=verdicts.DOCUMENTED,
        ),
        Claim(
            "B16",
            "… and makes big messages more stable",
            "NCCL's environment-variable documentation; the article's own before and after (one, for a "
            "bundle of changes)",
            "not checkable",
            "no documented mechanism makes a transfer 'more stable' with a larger buffer; the article's "
            "one before and after (§3.3: two-node busbw 11 → 21 GB/s once 'GDR and IB parameters' were "
            "changed; §5.2 step 3: GPUDirect RDMA and a larger buffer together, step 9.0 → 8.7 s, checked "
            "with nccl-tests) changed the variables together, so no single one's part, and no stability, "
            "is isolated",
            basis=verdicts.STATEMENT,
        ),
        Claim(
            "B16",
            f"CUDA_DEVICE_MAX_CONNECTIONS={e['cuda_device_max_connections']} belongs in the block "
            "(no reason given)",
            "CUDA's and Megatron-LM's documentation",
            "not checkable",
            "the variable caps the hardware work queues a process's streams share; the article gives it no "
            "reason, and Megatron-LM requires 1 where tensor-parallel communication overlaps compute (so "
            "that kernels are queued in order): a setting that depends on the framework, not a tuning gain",
            basis=verdicts.STATEMENT,
        ),
    ]


def _b16_network_rows(e: dict) -> list[Claim]:
    """The block's InfiniBand lines, one row each, against NCCL's documentation and source. What a
    variable does is its library's documented specification: a line that describes it rightly is
    confirmed, one that does not refuted, on that basis alone (no run here exercises it); a gain no
    measurement backs is not checkable."""
    timeout_s = e["ib_timeout_unit_s"] * 2 ** e["ib_timeout"]
    default_s = e["ib_timeout_unit_s"] * 2 ** e["ib_timeout_default"]
    return [
        Claim(
            "B16",
            f"NCCL_IB_TIMEOUT={e['ib_timeout']} avoids communication timeouts from occasional IB jitter",
            "NCCL's environment-variable documentation and source (the verbs timeout, 4.096 µs × 2^value)",
            "confirmed",
            f"the verbs retransmission timeout goes from {default_s:.1f} s (NCCL's default "
            f"{e['ib_timeout_default']}) to {timeout_s:.1f} s: a longer stall passes before NCCL reports "
            "an error, as NCCL's documentation suggests for large networks; it hides a stall, it does "
            "not speed anything",
            basis=verdicts.DOCUMENTED,
        ),
        Claim(
            "B16",
            f"NCCL_IB_QPS_PER_CONNECTION={e['ib_qps_per_connection']} sets the queue pairs per connection, "
            "with some room to tune bandwidth",
            "NCCL's environment-variable documentation",
            "confirmed",
            f"queue pairs per connection between two ranks, default {e['ib_qps_per_connection_default']}: "
            f"{e['ib_qps_per_connection']} spread a connection's traffic over more fabric paths (routing "
            "entropy on multi-level fabrics); the room's size depends on the fabric and is not stated",
            basis=verdicts.DOCUMENTED,
        ),
        Claim(
            "B16",
            f"NCCL_NET_GDR_LEVEL={e['net_gdr_level']} and NCCL_NET_GDR_READ=1 (GPUDirect RDMA) give a very "
            "clear gain across machines, provided NIC and GPU share a NUMA node",
            "NCCL's environment-variable documentation; the article's own before and after (one, for a "
            "bundle of changes)",
            "not checkable",
            f"level {e['net_gdr_level']} is PHB: the NIC reads and writes GPU memory directly where GPU and "
            "NIC share a NUMA node (through the CPU's host bridge), and GDR_READ=1 uses it on sends too; the "
            "mechanism is as the article says; the article's before and after (two-node busbw 11 → 21 GB/s, "
            "§3.3; step 9.0 → 8.7 s, §5.2 step 3) changed GDR, the IB parameters and the buffer together, so "
            "GDR's own part is not isolated, and a gain's size depends on the server's PCIe topology",
            basis=verdicts.STATEMENT,
        ),
        Claim(
            "B16",
            f"NCCL_IB_GID_INDEX={e['ib_gid_index']} and NCCL_SOCKET_IFNAME=ib0 belong in the block "
            "(no reason given)",
            "NCCL's environment-variable documentation",
            "not checkable",
            "the GID index is read in RoCE mode (RDMA over Ethernet), where the right value is the site's "
            "(show_gids); on a native InfiniBand fabric, the article's, it is not used; ib0 names the "
            "IP-over-InfiniBand interface for NCCL's bootstrap sockets: both are site settings, not tuning",
            basis=verdicts.STATEMENT,
        ),
    ]
