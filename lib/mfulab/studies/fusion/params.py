"""Parameters of the ``fusion`` study; the defaults are the laptop (``cpu``) profile."""

from __future__ import annotations

from dataclasses import dataclass

from mfulab.analytic.config import PRESETS
from mfulab.studykit.params import DTYPES, OneDevice, StudyParams, calibration_param, param

# The one-pass kernel's speed over ATen eager's in DRAM read 1.06x, 1.30x and 1.42x in fresh runs of
# the cpu profile on the AMD EPYC 2-core VM (make stability, 2026-12-05, 30 paired rounds each: a
# spread of 28% of the median), when each run read one copy of the inputs. Since 2026-12-07 the
# rounds cycle through ln_input_sets copies (below): over 8 fresh processes the same ratio read
# 1.47-1.66x (12% of its median), and the stability runs of three renders that day 6.0%, 9.8% and
# 3.6%. The widest, 12%, widens every DRAM comparison with ATen's eager on each side (A7's
# mechanism row reads the controls instead, LN_CONTROL_RATIO_DRIFT).
LN_DRAM_RATIO_DRIFT = 0.12
# Fusion's own effect, the C kernels against each other in DRAM (one pass over two with the same
# stores, and the stores' effect at the same passes): over 8 fresh processes of the bench on the
# AMD EPYC 2-core VM (2026-12-07, 32 rounds cycling 4 copies of the inputs), one pass over two read
# 1.11-1.19x with ordinary stores and 1.29-1.40x with streaming stores, streaming stores alone
# 1.28-1.37x: the widest range, 8% of its median; the first read 1.16-1.27x (8.9%) over the three
# stability runs of one render that day, so 9% is each side's widening. Without the copies
# (one x and a per process) the first ratio read 1.09-1.27x over 12 processes, and 1.10-1.22x
# between 4 copies in one process: where the inputs' pages sit moves it, so the rounds cycle the
# copies (ln_input_sets) and each ratio is a median over several placements.
LN_CONTROL_RATIO_DRIFT = 0.09


@dataclass(frozen=True)
class Params(OneDevice, StudyParams):
    device: str = param("auto", "auto | cpu | cuda")
    dtype: str = param("fp32", "fp32 | bf16 | fp16: the dtype of every kernel here")
    num_threads: int = param(0, "torch threads (0: torch's default)", unit="threads", non_negative=True)
    ln_tokens: int = param(
        0,
        "rows of the [tokens, hidden] LayerNorm sub-block input (0: sized from this machine's "
        "last-level cache with ln_llc_multiple, so that DRAM serves the tensors)",
        unit="tokens",
        non_negative=True,
    )
    # 8: at 4x the 2-core VM's 64 MiB cache floor, eager's intermediate h was partly cache-served
    # between its two kernels (its traffic read 50 GB/s against the calibrated 40.8); at 8x it reads
    # the calibrated bandwidth (2026-12-05)
    ln_llc_multiple: float = param(
        8.0,
        "with ln_tokens = 0: the sub-block's inputs and outputs (x, a, h, y) together are at least "
        "this many times the last-level cache (as far as memory allows)",
        unit="× LLC",
        positive=True,
    )
    ln_hidden: int = param(1024, "columns of the LayerNorm input", unit="elements", positive=True)
    ln_dram_ratio_drift: float = param(
        LN_DRAM_RATIO_DRIFT,
        "A7's mechanism (in DRAM): run-to-run drift of a fused kernel's speed over eager's, on each "
        "side of its interval (measured spread in params.py)",
        unit="fraction",
        non_negative=True,
    )
    ln_control_ratio_drift: float = param(
        LN_CONTROL_RATIO_DRIFT,
        "A7's mechanism with its controls (the C kernels against each other in DRAM): run-to-run "
        "drift of their ratios, on each side of an interval (measured spread in params.py)",
        unit="fraction",
        non_negative=True,
    )
    ln_input_sets: int = param(
        4,
        "copies of the DRAM-sized inputs (x, a) the sub-block's rounds cycle through, so that a "
        "ratio is a median over several placements of the inputs in memory (params.py)",
        unit="copies",
        positive=True,
    )
    pointwise_chain: bool = param(
        True,
        "B5's mechanism: time a pointwise chain eager, compiled and compiled with a graph break after "
        "every op (pointwise_chain.py; ten graphs to compile, about 16 s cold on the 2-core box)",
    )
    dropout_p: float = param(0.1, "the fused dropout's probability, in (0, 1) (p = 0 is also measured)")
    # 30: with 10, the one-pass kernel's 1.14x over eager in DRAM read [0.97, 1.30] and A7's
    # mechanism row flipped between fresh runs of the 2-core box (2026-12-05); a round of every
    # variant takes ~0.1 s there
    ln_rounds: int = param(
        30,
        "interleaved rounds of the sub-block and layer timings (each runs every variant once)",
        unit="rounds",
    )
    layer_batch: int = param(
        1,
        "sequences of the GPT layer whose forward the sub-block's share is measured against",
        unit="sequences",
        positive=True,
    )
    layer_seq_len: int = param(1024, "tokens per sequence of that layer", unit="tokens", positive=True)
    layer_heads: int = param(
        16, "attention heads of that layer (hidden = ln_hidden)", unit="heads", positive=True
    )
    attn_seq_lens: tuple[int, ...] = param(
        [256, 512, 1024, 2048], "attention sequence lengths", unit="tokens", positive=True
    )
    attn_batch: int = param(1, "attention batch size", unit="sequences", positive=True)
    attn_heads: int = param(8, "attention heads", unit="heads", positive=True)
    attn_head_dim: int = param(64, "attention head dimension", unit="elements", positive=True)
    naive_memory_limit_mib: float = param(
        600,
        "naive attention is skipped (with the reason) where its predicted s×s tensors exceed this",
        unit="MiB",
        positive=True,
    )
    compile_attention_seq_lens: tuple[int, ...] = param(
        [1024], "lengths at which naive attention is also compiled (a subset of attn_seq_lens)", unit="tokens"
    )
    compile_preset: str = param(
        "cpu-small", "model whose training step is compiled (B5; a config.preset name)"
    )
    compile_seq_len: int = param(
        256, "tokens per sequence of the compiled training step", unit="tokens", positive=True
    )
    compile_micro_batch: int = param(
        4, "sequences per compiled training step", unit="sequences", positive=True
    )
    compile_graph_break: bool = param(True, "also compile with a forced graph break in every block")
    compile_rounds: int = param(
        8, "interleaved rounds of the eager vs compiled training steps", unit="rounds"
    )
    compile_cold_process: bool = param(
        False,
        "also time each compiled variant's first call in a fresh process with an empty inductor "
        "cache (the cold compile a user pays once; it adds the fresh processes' compile time to the run)",
    )
    calibration: str = calibration_param()
    min_run_time_s: float = param(
        0.3, "minimum time of each timed attention benchmark", unit="s", positive=True
    )

    def predicted_peak_bytes(self) -> float | None:
        """The largest of the study's parts, one at a time: naive attention, which the benchmark
        skips where its s×s tensors would pass ``naive_memory_limit_mib`` (so at most that, plus
        q, k, v, the output and their gradients); the LayerNorm sub-block's inputs, output and
        gradients (about eight tensors of ``ln_tokens × ln_hidden``); B5's compiled model step
        without an optimizer, three models resident (default, reduce-overhead, graph break:
        ``memory.step_peak_bytes``). ``None`` on a CPU."""
        if self.device == "cpu":
            return None
        from mfulab.analytic.config import preset
        from mfulab.analytic.flops import param_count
        from mfulab.analytic.memory import step_peak_bytes
        from mfulab.units import MIB

        elem_bytes = 4 if self.dtype == "fp32" else 2
        qkv_out_and_grads_bytes = (
            8 * self.attn_batch * self.attn_heads * max(self.attn_seq_lens) * self.attn_head_dim * elem_bytes
        )
        attention_bytes = self.naive_memory_limit_mib * MIB + qkv_out_and_grads_bytes
        layernorm_bytes = 8 * self.ln_tokens * self.ln_hidden * elem_bytes
        cfg = preset(self.compile_preset).with_(seq_len=self.compile_seq_len)
        compiled_models = 3 if self.compile_graph_break else 2
        model_step_bytes = step_peak_bytes(
            cfg,
            micro_batch=self.compile_micro_batch,
            activation_bytes_per_elem=elem_bytes,
            attention="fused",
            optimizer=False,
        )["total_bytes"] + (compiled_models - 1) * 8 * param_count(cfg)
        return max(attention_bytes, layernorm_bytes, model_step_bytes)

    def check(self) -> None:
        self.require(
            "compile_attention_seq_lens",
            all(v > 0 for v in self.compile_attention_seq_lens),
            "a list of positive integers",
        )
        self.require(
            "compile_attention_seq_lens",
            set(self.compile_attention_seq_lens) <= set(self.attn_seq_lens),
            "a subset of attn_seq_lens",
        )
        self.require("dropout_p", 0 < self.dropout_p < 1, "in (0, 1)")
        for name in ("ln_rounds", "compile_rounds"):
            self.require(name, getattr(self, name) >= 2, "at least 2 (a paired interval needs rounds)")
        self.require(
            "layer_heads", self.ln_hidden % self.layer_heads == 0, f"a divisor of ln_hidden={self.ln_hidden}"
        )
        self.require_choice("compile_preset", PRESETS)
        self.require_choice("dtype", DTYPES)
