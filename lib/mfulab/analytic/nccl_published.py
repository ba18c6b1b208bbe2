"""Published nccl-tests all-reduce figures on GPU systems: the one list chapter 02 (B9's rules, its
table beside this machine's gloo benchmark) and chapter 10 (this machine against published
measurements) read, each row with its source, the largest message of its sweep, its NCCL version
and year where the source states them.

Bus bandwidth is nccl-tests' convention (``PERFORMANCE.md``): busbw = algbw × 2(n − 1)/n for an
all-reduce, the figure to set against the per-rank bottleneck link. ``line_gb_per_s`` is that
link's one-direction figure (GB = 1e9 B): a GPU's NVLink within a node, a node's NICs together
across nodes.

**One NVLS rule.** NVLink SHARP (NVLS, NCCL's default all-reduce on NVSwitch nodes of H100/H200)
reduces inside the switch, so fewer bytes cross each GPU's links than the ring formula behind
busbw counts: its busbw can pass the line rate. An NVLS row is an algorithm's gain over the ring,
never a share of the link (``share_of_line`` is None for it); a ring row (NCCL_ALGO=Ring, or
NVLS off, or a generation without it) is a share of the link.

Rows marked ``figure: expected`` are a maintainer's statement of what a healthy system reaches,
not a run; ``largest_message`` is the largest size the sweep ran (its command's ``-e`` stepped by
``-f``), not necessarily where the quoted figure was read.
"""

from __future__ import annotations

RING, NVLS, UNSTATED = "ring", "nvls", "not stated"

NCCL_TESTS_PUBLISHED = (
    {
        "system": "8 × A100 SXM4 80GB, one node",
        "gpu": "A100",
        "scope": "node",  # a node of 8 (B9's single-node rule reads these), a pair, or several nodes
        "fabric": "NVLink 3 / NVSwitch",
        "busbw_gb_per_s": 200.0,
        "line_gb_per_s": 300.0,  # 12 NVLink 3 links × 25 GB/s per direction
        "algorithm": UNSTATED,  # an A100 has no NVLS: a ring or tree over the links
        "figure": "measured",
        "largest_message": "512 MB (-b 8 -e 1G -f 4); the maintainer: still rising there, about 230 at 8G",
        "nccl_version": "2.18.1",
        "year": 2023,
        "source": "github.com/NVIDIA/nccl-tests issue 149 (2023): 'a busbw of ~200 GB/s'",
    },
    {
        "system": "8 × A100, one node of issue 1048's cluster",
        "gpu": "A100",
        "scope": "node",
        "fabric": "NVLink 3 / NVSwitch",
        "busbw_gb_per_s": 232.54,
        "line_gb_per_s": 300.0,
        "algorithm": UNSTATED,
        "figure": "measured",
        "largest_message": "4 GiB (-b 8 -e 4G -f 2 -g 8)",
        "nccl_version": None,
        "year": 2023,
        "source": "github.com/NVIDIA/nccl issue 1048 (2023): one node of 8 A100s, 232.54 GB/s busbw "
        "(its two nodes: 86 GB/s)",
    },
    {
        "system": "8 × H100 SXM, one node (ring)",
        "gpu": "H100",
        "scope": "node",
        "fabric": "NVLink 4 / NVSwitch",
        "busbw_gb_per_s": 370.0,
        "line_gb_per_s": 450.0,  # 18 NVLink 4 links: 900 GB/s both directions
        "algorithm": RING,
        "figure": "expected",
        "largest_message": "large messages (the reporter's 256M 'too small to reach peak')",
        "nccl_version": None,
        "year": 2024,
        "source": "github.com/NVIDIA/nccl-tests issue 212 (2024), NCCL maintainer: with NCCL_ALGO=RING "
        "~20% protocol overhead leaves ~370 GB/s effective on NVLink",
    },
    {
        "system": "8 × H100 SXM, one node (NVLS)",
        "gpu": "H100",
        "scope": "node",
        "fabric": "NVLink 4 SHARP",
        "busbw_gb_per_s": 480.0,
        "line_gb_per_s": 450.0,
        "algorithm": NVLS,
        "figure": "expected",
        "largest_message": "large messages",
        "nccl_version": None,
        "year": 2024,
        "source": "github.com/NVIDIA/nccl-tests issue 212 (2024), NCCL maintainer: all-reduce uses NVLink "
        "SHARP by default, peak busbw ~480 GB/s on 8 GPUs",
    },
    {
        "system": "8 × H200, one node (NVLS, NCCL's default)",
        "gpu": "H200",
        "scope": "node",
        "fabric": "NVLink 4 / NVSwitch",
        "busbw_gb_per_s": 475.0,
        "line_gb_per_s": 450.0,
        "algorithm": NVLS,  # not forced; above the line rate, so not a ring (NVLS is the default)
        "figure": "measured",
        "largest_message": "4 GiB (-b 64k -e 4G -f 2)",
        "nccl_version": "2.20.3",
        "year": 2024,
        "source": "github.com/NVIDIA/nccl-tests issue 272 (2024): 'peak bandwidth of 475 GB/s'",
    },
    {
        "system": "8 × H200, one node, SHARP off",
        "gpu": "H200",
        "scope": "node",
        "fabric": "NVLink 4 / NVSwitch",
        "busbw_gb_per_s": 367.61,
        "line_gb_per_s": 450.0,
        "algorithm": RING,  # NVLS disabled
        "figure": "measured",
        "largest_message": "16 GiB",
        "nccl_version": None,
        "year": None,
        "source": "stas00/ml-engineering at c53741b, network/benchmarks/results/all-reduce-8xH200.md "
        "(SHARP disabled: 367.61 GBps)",
    },
    {
        "system": "8 × H200, one node, SHARP on",
        "gpu": "H200",
        "scope": "node",
        "fabric": "NVLink 4 SHARP",
        "busbw_gb_per_s": 480.70,
        "line_gb_per_s": 450.0,
        "algorithm": NVLS,
        "figure": "measured",
        "largest_message": "16 GiB",
        "nccl_version": None,
        "year": None,
        "source": "stas00/ml-engineering at 0cc3de5, network/benchmarks/README.md ('How the calls are "
        "timed': 8× H200, nccl-tests column, 16 GiB)",
    },
    {
        "system": "2 × A100 joined by 12 NVLink 3 links (NV12)",
        "gpu": "A100",
        "scope": "pair",
        "fabric": "NVLink 3",
        "busbw_gb_per_s": 208.0,
        "line_gb_per_s": 300.0,
        "algorithm": UNSTATED,
        "figure": "measured",
        "largest_message": "8 GiB (-b 8 -e 12G -f 2 -t 2)",
        "nccl_version": None,
        "year": 2023,
        "source": "github.com/NVIDIA/nccl-tests issue 178 (2023): 'Bus_BW: 208 GBps'",
    },
    {
        "system": "3 nodes × 8 A100 SXM4 40GB",
        "gpu": "A100",
        "scope": "nodes",
        "fabric": "InfiniBand, 4 × HDR 200 Gb/s per node",
        "busbw_gb_per_s": 96.0,
        "line_gb_per_s": 100.0,  # 4 HDR ports per node: 100 GB/s per node and direction
        "algorithm": UNSTATED,
        "figure": "measured",
        "largest_message": "127 MiB (-b 8 -e 128M, 1 MiB steps): the top of its sweep; average 84.8",
        "nccl_version": None,
        "year": 2022,
        "source": "github.com/NVIDIA/nccl-tests issue 119 (2022): peak ~96 GB/s (average 84.8) against "
        "the 100 GB/s of 4 HDR ports; the maintainer: '96GB/s is the target'",
    },
    {
        "system": "2 nodes × 8 A100",
        "gpu": "A100",
        "scope": "nodes",
        "fabric": "InfiniBand, 4 × 200 Gb/s per node",
        "busbw_gb_per_s": 86.0,
        "line_gb_per_s": 100.0,
        # the same cluster's one-node run in the same report: what B9's two-node rule divides by
        "one_node_busbw_gb_per_s": 232.54,
        "algorithm": UNSTATED,
        "figure": "measured",
        "largest_message": "not shown (its one-node sweep: 4 GiB)",
        "nccl_version": None,
        "year": 2023,
        "source": "github.com/NVIDIA/nccl issue 1048 (2023): two nodes of 8 A100 with 4 × 200 Gb/s IB each, "
        "all_reduce_perf 86 GB/s busbw (the reporter's theoretical 96); one node of the same cluster 232.54",
    },
    {
        "system": "4 nodes × 8 V100, one 100 Gb/s EDR NIC each",
        "gpu": "other",
        "scope": "nodes",
        "fabric": "InfiniBand EDR 100 Gb/s",
        "busbw_gb_per_s": 12.2,
        "line_gb_per_s": 12.5,
        "algorithm": UNSTATED,
        "figure": "expected",
        "largest_message": "512 MiB (-b 8 -e 512M -f 2)",
        "nccl_version": "2.4.7",
        "year": 2019,
        "source": "github.com/NVIDIA/nccl-tests issue 29 (2019), NCCL maintainer: '12.2 GB/s (for a 100Gbps "
        "card) is as good as you can get'",
    },
)


def share_of_line(row: dict) -> float | None:
    """A published row's busbw over its link's one-direction line rate; None for an NVLS row (an
    in-switch reduction moves fewer bytes than busbw's ring formula counts: no share of a link)."""
    if row["algorithm"] == NVLS:
        return None
    return row["busbw_gb_per_s"] / row["line_gb_per_s"]


def ring_rows(scope: str | None = None) -> list[dict]:
    """The rows that are shares of a link (not NVLS), of one ``scope`` where given."""
    return [r for r in NCCL_TESTS_PUBLISHED if r["algorithm"] != NVLS and scope in (None, r["scope"])]


def label(row: dict) -> str:
    """A row's short label: system, largest message, NCCL version and year where stated."""
    version = f"NCCL {row['nccl_version']}" if row.get("nccl_version") else "NCCL version not stated"
    year = str(row["year"]) if row.get("year") else "year not stated"
    kind = ", expected (a maintainer's figure)" if row["figure"] == "expected" else ""
    largest = row["largest_message"].split(" (")[0]
    sweep = "largest message not shown" if largest.startswith("not") else f"to {largest}"
    return f"{row['system']}: {sweep}, {version}, {year}{kind}"
