"""Parameters of the ``parallelism`` study; the defaults are the laptop (``cpu``) profile:
gloo ranks on this machine's cores, emulated stage compute for the pipeline (sleeps: no core
busy), the tiny reference GPT for sharding and tensor parallelism."""

from __future__ import annotations

from dataclasses import dataclass

from mfulab.analytic.config import PRESETS
from mfulab.studykit.params import StudyParams, param

SCHEDULES = ("gpipe", "1f1b", "interleaved")
COMPUTE = ("emulated", "real")
SHARDING = ("ddp", "fsdp_grad_op", "fsdp_full")


@dataclass(frozen=True)
class Params(StudyParams):
    device: str = param("cpu", "cpu (gloo ranks) | cuda (NCCL, one GPU per rank)", choices=("cpu", "cuda"))
    pipeline_ranks: tuple[int, ...] = param([2, 4], "pipeline stages measured (one rank each)", unit="ranks")
    pipeline_schedules: tuple[str, ...] = param(list(SCHEDULES), "gpipe | 1f1b | interleaved")
    pipeline_virtual_stages: int = param(
        2, "model chunks per rank of the interleaved schedule", positive=True
    )
    pipeline_micro_batch_counts: tuple[int, ...] = param(
        [1, 2, 4, 8, 16], "micro-batches per step (m)", unit="micro-batches", positive=True
    )
    pipeline_layers_per_rank: int = param(4, "layers each rank holds", unit="layers", positive=True)
    pipeline_layer_forward_s: float = param(
        0.005, "emulated: each layer's forward sleeps this long", unit="s", positive=True
    )
    pipeline_layer_backward_s: float = param(
        0.010, "emulated: each layer's backward sleeps this long (2× forward, as for a matmul)", unit="s"
    )
    pipeline_real_ranks: int = param(2, "ranks of the real-compute pipeline (0: skip)", unit="ranks")
    pipeline_real_hidden: int = param(256, "real compute: width of each Linear layer", unit="features")
    pipeline_micro_batch_rows: int = param(16, "rows per micro-batch", unit="rows", positive=True)
    pipeline_steps: int = param(5, "timed steps per (schedule, m), after one warm-up", unit="steps")
    preset: str = param("tiny", "the reference GPT for sharding and tensor parallelism (config.preset)")
    seq_len: int = param(64, "its tokens per sequence", unit="tokens", positive=True)
    micro_batch: int = param(2, "its sequences per micro-batch", unit="sequences", positive=True)
    sharding_configs: tuple[str, ...] = param(list(SHARDING), "ddp | fsdp_grad_op | fsdp_full (ddp first)")
    accumulation: tuple[int, ...] = param([1, 4], "micro-batches per optimizer step", positive=True)
    ranks: int = param(2, "ranks of the sharding, tensor-parallel and MoE runs", unit="ranks")
    a2a_sizes_bytes: tuple[int, ...] = param(
        [4096, 65536, 1048576, 16777216], "all-to-all vs all-reduce buffer sizes", unit="B", positive=True
    )
    a2a_rounds: int = param(10, "interleaved rounds per size", unit="rounds", positive=True)
    moe_tokens_per_rank: int = param(1024, "tokens each rank routes per step", unit="tokens", positive=True)
    moe_hidden: int = param(256, "hidden size of a routed token", unit="features", positive=True)
    moe_imbalances: tuple[float, ...] = param(
        [1.0, 1.5], "most loaded expert rank's tokens over the mean (1: even)", unit="×", positive=True
    )
    moe_expert_s_per_token: float = param(
        1e-5, "emulated expert compute per received token (a sleep)", unit="s", positive=True
    )
    moe_steps: int = param(5, "expert-layer steps per imbalance", unit="steps", positive=True)
    timeout_s: float = param(600, "wall-clock limit of each torchrun job", unit="s", positive=True)

    def predicted_peak_bytes(self) -> float | None:
        """Per GPU, the largest of the parts, one job at a time: the reference GPT's DDP step with
        AdamW in fp32 (``memory.step_peak_bytes``, SDPA attention, DDP's bucket copy of the
        gradients; FSDP2 and TP hold less); the all-to-all's largest buffer in and out; the MoE
        step's tokens sent, received and returned (fp32). ``None`` on the host's gloo ranks."""
        if self.device == "cpu":
            return None
        from mfulab.analytic.config import preset
        from mfulab.analytic.memory import step_peak_bytes

        cfg = preset(self.preset).with_(seq_len=self.seq_len)
        ddp_step_bytes = step_peak_bytes(
            cfg,
            micro_batch=self.micro_batch,
            activation_bytes_per_elem=4,
            attention="fused",
            optimizer=True,
            gradient_copies=1,  # DDP's buckets
        )["total_bytes"]
        all_to_all_bytes = 2 * max(self.a2a_sizes_bytes)
        moe_bytes = (
            3 * 4 * self.moe_tokens_per_rank * self.moe_hidden * max(1.0, 1 + max(self.moe_imbalances))
        )
        return max(ddp_step_bytes, all_to_all_bytes, moe_bytes)

    def check(self) -> None:
        self.require_choice("pipeline_schedules", SCHEDULES)
        self.require_choice("sharding_configs", SHARDING)
        self.require("sharding_configs", self.sharding_configs[0] == "ddp", "a list that starts with ddp")
        self.require("preset", self.preset in PRESETS, f"one of {', '.join(PRESETS)}")
        self.require("pipeline_ranks", all(r >= 2 for r in self.pipeline_ranks), "a list of rank counts ≥ 2")
        self.require("ranks", self.ranks >= 2, "at least 2")
        self.require(
            "pipeline_layers_per_rank",
            self.pipeline_layers_per_rank % self.pipeline_virtual_stages == 0,
            f"a multiple of pipeline_virtual_stages={self.pipeline_virtual_stages}",
        )
        cfg = PRESETS[self.preset]
        self.require(
            "ranks",
            cfg.n_heads % self.ranks == 0 and (cfg.n_kv_heads or cfg.n_heads) % self.ranks == 0,
            f"a divisor of the {cfg.n_heads} heads of {self.preset} (tensor parallelism splits heads)",
        )
        self.require(
            "seq_len", self.seq_len % self.ranks == 0, f"a multiple of ranks={self.ranks} (sequence shards)"
        )

    @property
    def nproc(self) -> int:
        """The most ranks one of the study's torchrun jobs needs."""
        return max(*self.pipeline_ranks, self.ranks, self.pipeline_real_ranks)

    def prepare(self) -> None:
        from mfulab.measure.launch import check_world_size

        check_world_size(self.nproc, self.device)
