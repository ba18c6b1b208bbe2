"""Parameters of the ``overlap`` study; the defaults are the laptop (``cpu``) profile: 2 ranks
on gloo on the 2-core box."""

from __future__ import annotations

from dataclasses import dataclass

from mfulab.analytic.comm import OPS
from mfulab.analytic.rates import AT_SCALE_MATMUL_SHARE_OF_MAMF
from mfulab.errors import ParameterError
from mfulab.studykit.params import StudyParams, calibration_param, param

BENCHMARK_OPS = OPS[:4]  # the collectives the benchmark worker runs and checks
MODES = ("real", "emulated")


@dataclass(frozen=True)
class Params(StudyParams):
    device: str = param("cpu", "auto | cpu | cuda (cuda: NCCL, one GPU per rank)")
    calibration: str = calibration_param()
    nproc: int = param(2, "ranks of the torchrun job (at least 2)", unit="ranks", positive=True)
    ops: tuple[str, ...] = param(
        list(BENCHMARK_OPS), "collectives benchmarked, from " + " | ".join(BENCHMARK_OPS)
    )
    min_size_log2: int = param(10, "smallest message size: 2^min_size_log2 bytes", unit="log2 bytes")
    max_size_log2: int = param(26, "largest message size: 2^max_size_log2 bytes", unit="log2 bytes")
    warmup: int = param(2, "untimed calls per collective and size", unit="calls", non_negative=True)
    iters: int = param(21, "timed calls per collective and size", unit="calls", positive=True)
    overlap_bytes: int = param(
        16777216,
        "the tensor all-reduced in chunks (float32); default: at 16 chunks about half of each call is "
        "per-call latency on the 2-core box (the calibration's α–β), where the per-call cost is large "
        "enough to measure; the article's scale is bandwidth-dominated (about 11%: latency_share_k16 in "
        "tables/a5_sensitivity.csv), which a5_regime_bytes reaches",
        unit="bytes",
        positive=True,
    )
    compute_over_comm: float = param(
        2.0,
        "compute time per step as a multiple of the tensor's one-shot all-reduce, measured at the start "
        "of the run (claim A3: 20 ms of compute per 10 ms of communication)",
        unit="×",
        positive=True,
    )
    chunks: tuple[int, ...] = param(
        [1, 2, 4, 8, 16, 32, 64, 128], "chunk counts k swept", unit="chunks", positive=True
    )
    modes: tuple[str, ...] = param(
        ["emulated", "real"],
        "compute modes: emulated (a timed wait: occupies time, not a core) | real (matmuls)",
    )
    rounds: int = param(
        15,
        "interleaved rounds per compute mode: each round runs every (variant, k) once, in a shuffled order",
        unit="rounds",
        positive=True,
    )
    seed: int = param(0, "seed of the per-round order of the interleaved variants", non_negative=True)
    a18_compute_over_comm: tuple[float, ...] = param(
        [0.5, 1.0, 2.0, 4.0],
        "A18: compute ÷ communication ratios swept with emulated compute (the exposed share against "
        "the ratio; empty: no sweep)",
        unit="×",
        positive=True,
    )
    a3_duty_cycles: tuple[float, ...] = param(
        [0.25, 0.5, 0.75],
        "A3 on a CPU: shares of each chunk's compute interval spent in real matmuls (the rest a timed "
        "wait), between the emulated engine (0) and real compute (1): how much overlap recovers as the "
        "compute takes more of the cores gloo needs (empty: no sweep)",
        unit="fraction",
        positive=True,
    )
    a18_k: int = param(8, "A18: the chunk count of the sweep's overlapped step", unit="chunks", positive=True)
    a18_rounds: int = param(7, "A18: interleaved rounds per ratio", unit="rounds", positive=True)
    a5_rounds: int = param(
        40,
        "A5: interleaved rounds of the step's all-reduces alone at k = 4 and k = 16, on top of the sweep's "
        "(their median ratio needs more rounds than the sweep gives every k)",
        unit="rounds",
        positive=True,
    )
    timeout_s: float = param(900.0, "time limit of each torchrun job", unit="s", positive=True)
    a5_regime_bytes: int = param(
        167772160,
        "A5's intervention again on a tensor this large (float32; 0 skips it), chosen so that a 16-chunk "
        "call's per-call share on the 2-core box's α–β (about 10% at 160 MiB) is near the article's scale's "
        "(about 11%, NCCL's cost model at 200 MB over 4 DP ranks): the mechanism in the article's regime",
        unit="bytes",
        non_negative=True,
    )
    a5_regime_chunks: int = param(
        64,
        "A5's intervention on a5_regime_bytes compares k = 4 with this many chunks (k = 4 padded with the "
        "difference in one-element calls): 4 → 16 adds 12 calls, a gap within this box's noise at 160 MiB "
        "(round seventeen's reader of chapter 02); 4 → 64 adds 60, and a 64-chunk call there is still "
        "bandwidth-dominated (about a third of it latency)",
        unit="chunks",
        positive=True,
    )
    a5_mechanism_min_share: float = param(
        0.8,
        "A5's mechanism: each estimate of the per-call cost (12 more calls × 2(n−1)α with the "
        "calibration's α; this run's single calls) must lie between this share of the measured k = 4 → 16 "
        "gap and its inverse for the fixed cost of a call to count as the cause the article names "
        "(assumed: other causes at most a fifth of the gap, and a cost far past the gap explains it no "
        "better); under 1 − this share by every estimate, it is not the cause",
        positive=True,
    )
    article_n: int = param(32, "the article's scale: ranks (cards)", unit="ranks", positive=True)
    article_alpha_s: float = param(
        2.0e-5,
        "A5's ring-only sensitivity row (NCCL_ALGO=Ring): per-step latency α (assumed; the stated case "
        "uses NCCL's cost model, the rows 2–20 µs)",
        unit="s",
        non_negative=True,
    )
    article_link_bytes_per_s: float = param(
        25.0e9,
        "the article's scale: link bandwidth between nodes per card and direction (200 Gb/s = "
        "25 GB/s: the Ascend 910B's RoCE port in devices.yaml, and article B's HDR limit)",
        unit="B/s",
        positive=True,
    )
    article_device: str = param(
        "ascend-910b",
        "A4: the article's cards, a devices.yaml key (the step model reads their peak, memory and the "
        "links inside and between nodes from it: HCCS and 200 Gb/s RoCE for the 910B)",
    )
    article_gpus_per_node: int = param(8, "the article's scale: cards per node", unit="cards", positive=True)
    article_matmul_share_of_mamf: float = param(
        AT_SCALE_MATMUL_SHARE_OF_MAMF,
        "A4: the share of the device's best measured GEMM (MAMF) a training step's GEMMs reach "
        "(assumed: chapter 09 fits 0.81 on published Megatron runs; chapter 08 states 0.8)",
        positive=True,
    )
    article_global_batch: int = param(
        32,
        "A4: sequences per optimizer step (assumed: the global batch of the article's 13B command, "
        "§8, which it states for one 8-card machine)",
        unit="sequences",
        positive=True,
    )

    def predicted_peak_bytes(self) -> float | None:
        """Per GPU: the sweep's largest message in and out (an all-gather's output is the whole
        message, its input a share of it: at most twice the message), or the overlapped step's
        ``overlap_bytes`` (or A5's ``a5_regime_bytes``) of fp32 gradients with a copy, beside the
        bf16 matmul operands the CUDA compute calibrates (``bench.CUDA_MM_SIZE`` and smaller: a few
        × 4096² × 2 bytes).
        ``None`` on the host's gloo ranks."""
        if self.device == "cpu":
            return None
        largest_message_bytes = 2**self.max_size_log2
        sweep_bytes = 2 * largest_message_bytes
        overlap_step_bytes = 2 * max(self.overlap_bytes, self.a5_regime_bytes)
        matmul_operand_bytes = 8 * 4096**2 * 2
        return max(sweep_bytes, overlap_step_bytes) + matmul_operand_bytes

    def check(self) -> None:
        self.require(
            "nproc",
            self.nproc >= 2,
            "at least 2: one rank has no collective to measure "
            "(on a single GPU use the host's gloo ranks, device: cpu)",
        )
        self.require(
            "min_size_log2",
            2 <= self.min_size_log2 <= 34,
            "between 2 and 34 (message sizes 2^min_size_log2 .. 2^max_size_log2 bytes)",
        )
        self.require(
            "max_size_log2",
            self.min_size_log2 <= self.max_size_log2 <= 34,
            f"between min_size_log2 ({self.min_size_log2}) and 34",
        )
        self.require_choice("ops", BENCHMARK_OPS)
        for k in self.chunks:
            self.require(
                "chunks",
                (self.overlap_bytes // 4) % k == 0,
                f"counts that split overlap_bytes={self.overlap_bytes} (as float32 elements) into "
                f"equal chunks, but it does not split into {k}; use a power-of-two size or other "
                "chunk counts",
            )
        self.require("rounds", self.rounds >= 3, "at least 3 (a paired interval needs several rounds)")
        self.require(
            "a18_rounds", self.a18_rounds >= 3, "at least 3 (a paired interval needs several rounds)"
        )
        self.require("a5_rounds", self.a5_rounds >= 3, "at least 3 (a paired interval needs several rounds)")
        self.require(
            "a5_regime_bytes",
            (self.a5_regime_bytes // 4) % (4 * self.a5_regime_chunks) == 0,
            "a size whose float32 elements split into 4 and a5_regime_chunks equal chunks (0 skips the pass)",
        )
        self.require("a5_regime_chunks", self.a5_regime_chunks > 4, "more than 4 (it is compared with k = 4)")
        self.require(
            "a18_k",
            (self.overlap_bytes // 4) % self.a18_k == 0,
            f"a count that splits overlap_bytes={self.overlap_bytes} (as float32 elements) into equal chunks",
        )
        self.require(
            "article_matmul_share_of_mamf", self.article_matmul_share_of_mamf <= 1, "a share of MAMF: ≤ 1"
        )
        self._require_device_key("article_device", self.article_device)
        self.require_choice("modes", MODES)
        self.require("a5_mechanism_min_share", self.a5_mechanism_min_share <= 1, "a share of the gap: ≤ 1")

    @staticmethod
    def _require_device_key(name: str, key: str) -> None:
        from mfulab.analytic.devices import device_spec

        try:
            device_spec(key)
        except ParameterError as err:
            raise ParameterError(f"{name}: {err}") from None

    def prepare(self) -> None:
        from mfulab.measure.launch import check_world_size

        self.resolve_device()
        check_world_size(self.nproc, self.device)
