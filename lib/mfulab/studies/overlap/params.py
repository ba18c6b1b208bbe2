"""Parameters of the ``overlap`` study; the defaults are the laptop (``cpu``) profile: 2 ranks
on gloo on the 2-core box."""

from __future__ import annotations

from dataclasses import dataclass

from ...comm import OPS
from ...params import StudyParams, calibration_param, param

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
    iters: int = param(7, "timed calls per collective and size", unit="calls", positive=True)
    overlap_bytes: int = param(
        33554432, "the tensor all-reduced in chunks (float32)", unit="bytes", positive=True
    )
    compute_s: float = param(0.12, "compute time that produces that tensor", unit="s", positive=True)
    chunks: tuple[int, ...] = param(
        [1, 2, 4, 8, 16, 32, 64, 128], "chunk counts k swept", unit="chunks", positive=True
    )
    modes: tuple[str, ...] = param(
        ["emulated", "real"],
        "compute modes: emulated (a timed wait: occupies time, not a core) | real (matmuls)",
    )
    reps: int = param(5, "timed repetitions per (mode, k)", unit="repetitions", positive=True)
    timeout_s: float = param(900.0, "time limit of each torchrun job", unit="s", positive=True)
    article_n: int = param(32, "the article's scale: ranks", unit="ranks", positive=True)
    article_alpha_s: float = param(
        2.0e-5, "the article's scale: per-step latency α (assumed)", unit="s", non_negative=True
    )
    article_link_bytes_per_s: float = param(
        25.0e9, "the article's scale: link bandwidth (IB HDR 200 Gb/s)", unit="B/s", positive=True
    )

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
        self.require_choice("modes", MODES)

    def prepare(self) -> None:
        from ...launch import check_world_size

        self.resolve_device()
        check_world_size(self.nproc, self.device)
