"""Parameters of the ``recompute`` study; the defaults are the laptop (``cpu``) profile."""

from __future__ import annotations

from dataclasses import dataclass

from mfulab.analytic.config import ATTENTION_IMPLS, RECOMPUTE_POLICIES, preset
from mfulab.studies.recompute.planner import STATED_ASSUMPTIONS, check_case
from mfulab.studies.recompute.stated import PLANNER_CASES
from mfulab.studykit.params import DTYPES, OneDevice, PresetModel, StudyParams, param
from mfulab.units import MIB

POLICIES = tuple(RECOMPUTE_POLICIES)  # the study measures every policy of the vocabulary
ATTN_IMPLS = tuple(ATTENTION_IMPLS)  # the study measures both implementations


# B7's full / none step ratio moved 1.21 → 1.35 → 1.57× over three fresh runs of the cpu profile on
# the 2-core box (make stability, 2026-12-04, 12 paired rounds each), while each run's own interval
# was about ±7%: the process, not the rounds, sets the spread. Its interval is widened by this much
# on each side, so a single run cannot claim a precision the next run would not repeat. That was the
# AMD EPYC VM, the reference box until 2026-12-05; the Intel Xeon VM that replaced it spreads less
# (its stability.json), and its cpu profile sets its own figure (studies/recompute/cpu.yaml).
B7_RATIO_DRIFT = 0.3


@dataclass(frozen=True)
class Params(OneDevice, PresetModel, StudyParams):
    preset: str = param("cpu-deep", "the model measured (a config.preset name)")
    seq_len: int = param(512, "tokens per sequence", unit="tokens", positive=True)
    micro_batches: tuple[int, ...] = param(
        [1, 2],
        "micro-batches whose peak memory is measured for every policy (the smallest is the base of "
        "every other measurement); a policy whose largest one fits memory_budget_mib doubles it "
        "until it does not (up to max_micro_batch)",
        unit="sequences",
        positive=True,
    )
    max_micro_batch: int = param(
        16,
        "B7: the largest micro-batch the memory-budget search tries; a policy that still fits there "
        "shows '≥ max_micro_batch (search limit)'",
        unit="sequences",
        positive=True,
    )
    policies: tuple[str, ...] = param(
        ["none", "selective", "mlp", "full", "every_k", "sac"],
        "recompute policies measured (config.RECOMPUTE_POLICIES); 'none' is the reference and must be there",
    )
    every_k: int = param(4, "blocks fully recomputed by the every_k policy (the first k)", unit="blocks")
    attn_impl: str = param(
        "naive", "naive | sdpa: naive keeps the a·s² scores (what selective recompute removes); sdpa does not"
    )
    device: str = param("auto", "auto | cpu | cuda")
    dtype: str = param(
        "fp32",
        "fp32 | bf16 | fp16: precision of the peak-memory, gradient and step-time measurements "
        "(bf16, fp16: the forward under autocast, fp32 weights); the exact saved-bytes accounting "
        "and the FLOP count stay fp32 (Korthikanti's formula with one element size)",
    )
    num_threads: int = param(0, "torch threads (0: torch's default)", unit="threads", non_negative=True)
    memory_budget_mib: float = param(
        200,
        "B7: each policy takes the largest measured micro-batch whose step adds at most this much memory",
        unit="MiB",
        positive=True,
    )
    timing_rounds: int = param(
        6,
        "rounds of the interleaved step timing (each round times every policy and micro-batch once)",
        unit="rounds",
        positive=True,
    )
    b7_rounds: int = param(
        15,
        "B7 (same batch): rounds of a timing of full and none alone at the smallest micro-batch, "
        "interleaved (0: read B7 off the step timing above)",
        unit="rounds",
        non_negative=True,
    )
    b7_ratio_drift: float = param(
        B7_RATIO_DRIFT,
        "B7 (same batch): run-to-run drift of the full / none step ratio, on each side of its interval "
        "(measured spread in params.py)",
        unit="fraction",
        non_negative=True,
    )
    planner_cases: tuple[dict, ...] = param(
        list(PLANNER_CASES),
        "analytic planner cases (name, preset, "
        "device (a devices.yaml key), tp, pp, dp, zero_stage, "
        "global_batch, micro_batches, policies); see stated.py",
    )
    planner_matmul_share_of_mamf: float = param(
        STATED_ASSUMPTIONS["matmul_share_of_mamf"],
        "planner assumption (the step model's, not measured here): share of the device's best measured "
        "GEMM (MAMF) a training step's GEMMs reach; chapter 09 fits 0.81, chapter 08 states 0.8 "
        "(sensitivity table in notebook 04)",
        unit="fraction",
        positive=True,
    )
    fragmentation_margin: float = param(
        0.1,
        "share of device memory the planner keeps free (allocator fragmentation, runtime context, "
        "communication buffers): our assumption; ZeRO (Rajbhandari et al. 2020, Sec. 3.2) saw OOM with "
        "over 30% free in extreme cases",
        unit="fraction",
        non_negative=True,
    )

    def check(self) -> None:
        cfg = preset(self.preset)
        self.require_choice("policies", POLICIES)
        self.require("policies", "none" in self.policies, "a list that includes 'none' (the reference)")
        if "every_k" in self.policies:
            self.require(
                "every_k",
                1 <= self.every_k <= cfg.n_layers,
                f"between 1 and n_layers={cfg.n_layers} of preset {self.preset}",
            )
        self.require_choice("attn_impl", ATTN_IMPLS)
        self.require_choice("dtype", DTYPES)
        self.require(
            "max_micro_batch",
            self.max_micro_batch >= max(self.micro_batches),
            "at least the largest micro_batches",
        )
        for case in self.planner_cases:
            check_case(case)
        self.require("planner_matmul_share_of_mamf", self.planner_matmul_share_of_mamf <= 1, "at most 1")
        self.require("fragmentation_margin", self.fragmentation_margin < 1, "below 1")
        self.require("timing_rounds", self.timing_rounds >= 2, "at least 2 (a paired comparison)")
        self.require(
            "b7_rounds", self.b7_rounds == 0 or self.b7_rounds >= 2, "0 or at least 2 (a paired comparison)"
        )

    def predicted_peak_bytes(self) -> float:
        """The larger of the measurement's two peaks (``memory.step_peak_bytes``, no optimizer):

        - the grid: forward + backward in ``dtype`` without recompute (the largest policy) at the
          grid's largest micro-batch, beside two gradient copies (the reference's and the policy's,
          compared elementwise). The search beyond the grid may run out of memory: such a point is
          recorded as not fitting;
        - the interleaved timing (``bench.step_times``): one model per policy stays resident, each
          with its fp32 weights and the gradients of its last step, while the largest chosen
          point adds up to ``memory_budget_mib`` on top."""
        from mfulab.analytic.flops import param_count
        from mfulab.analytic.memory import step_peak_bytes

        cfg = self.model_config()
        grid_peak_bytes = step_peak_bytes(
            cfg,
            micro_batch=max(self.micro_batches),
            activation_bytes_per_elem=4 if self.dtype == "fp32" else 2,
            attention=ATTENTION_IMPLS[self.attn_impl],
            optimizer=False,
            gradient_copies=2,
        )["total_bytes"]
        resident_model_bytes = (4 + 4) * param_count(cfg)  # fp32 weights and their gradients
        timing_peak_bytes = len(self.policies) * resident_model_bytes + self.memory_budget_mib * MIB
        return max(grid_peak_bytes, timing_peak_bytes)

    def step_assumptions(self) -> dict:
        """The step model's assumptions the planner states (``rates.Assumptions`` fields)."""
        return {**STATED_ASSUMPTIONS, "matmul_share_of_mamf": self.planner_matmul_share_of_mamf}
