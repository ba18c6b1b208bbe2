"""What a GPU run depends on, checked here: the precision a step runs in and how rows name it,
the availability checks that turn a compiler failure into a reason instead of a crash, and the
allocator baseline of the attention peaks (no earlier gradients alive)."""

import pytest
import torch
import yaml

from mfulab.errors import ParameterError
from mfulab.measure import timing
from mfulab.studies.fusion import bench as fusion_bench
from mfulab.studies.fusion import compile_bench, kernels
from mfulab.studies.fusion.params import Params as FusionParams
from mfulab.studies.recompute import analysis as recompute_analysis
from mfulab.studies.recompute import bench as recompute_bench
from mfulab.studies.recompute.params import Params as RecomputeParams

from conftest import ROOT


def _profile(study_id, name, **extra):
    return {**yaml.safe_load((ROOT / "studies" / study_id / f"{name}.yaml").read_text()), **extra}


def test_autocast_runs_low_precision_matmuls_and_labels_say_so():
    a = torch.randn(8, 8)
    for dtype, expected in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        with timing.autocast("cpu", dtype):
            assert (a @ a).dtype == expected
    assert timing.dtype_label("fp32") == "fp32" and timing.dtype_label("bf16") == "bf16 autocast"
    assert timing.tf32_state("cpu") is None  # TF32 does not exist on a CPU: recorded as such


def test_recompute_dtype_is_validated_and_sizes_the_memory_guard():
    with pytest.raises(ParameterError, match="dtype"):
        RecomputeParams.from_dict({"dtype": "fp8"})
    with pytest.raises(ParameterError, match="fp16 is not supported"):
        RecomputeParams.from_dict({"dtype": "fp16", "device": "cpu"}).prepared()
    gpu = _profile("recompute", "gpu", device="cpu")
    assert gpu["dtype"] == "bf16"  # the GPU profile runs the step as mixed-precision training does
    small_budget = {**gpu, "memory_budget_mib": 1000}  # the grid's peak, not the timing's, decides
    bf16, fp32 = (
        RecomputeParams.from_dict({**small_budget, "dtype": d}).predicted_peak_bytes()
        for d in ("bf16", "fp32")
    )
    assert bf16 < fp32


def test_recompute_memory_guard_counts_the_models_the_interleaved_timing_keeps_resident():
    """The gpu profile times one gpt2-350m per policy, all resident (fp32 weights and the last
    step's gradients, 2.8 GB each), with the largest chosen point up to memory_budget_mib on top:
    the guard's peak is at least that, not one model's step (the audit's 26.5 GiB)."""
    from mfulab.analytic.flops import param_count

    p = RecomputeParams.from_dict(_profile("recompute", "gpu", device="cpu"))
    resident_bytes = len(p.policies) * 8 * param_count(p.model_config())
    assert resident_bytes > 15e9
    assert p.predicted_peak_bytes() >= resident_bytes + p.memory_budget_mib * 2**20
    fewer = RecomputeParams.from_dict(
        {**_profile("recompute", "gpu", device="cpu"), "policies": ["none", "full"]}
    )
    assert fewer.predicted_peak_bytes() < p.predicted_peak_bytes()


def test_recompute_gradients_run_in_the_dtype_and_pass_the_gate():
    from mfulab.analytic.config import preset

    cfg = preset("tiny")
    kw = dict(every_k=1, attn_impl="sdpa", device="cpu", micro_batch=1)
    g32 = recompute_bench.gradients(cfg, policy="none", dtype="fp32", **kw)
    ref = recompute_bench.gradients(cfg, policy="none", dtype="bf16", **kw)
    full = recompute_bench.gradients(cfg, policy="full", dtype="bf16", **kw)
    assert max(float((ref[n] - g32[n]).abs().max()) for n in ref) > 0  # autocast was on
    diff = max(float((full[n] - ref[n]).abs().max()) for n in ref)
    assert diff <= recompute_analysis.GRADIENT_TOLERANCE["bf16"]


def test_torch_compile_availability_check_builds_and_runs_a_kernel():
    assert kernels.compile_status("cpu") == (True, "")


def test_a_torch_compile_failure_is_a_reason_not_a_crash(monkeypatch):
    def broken(fn, **kw):
        def run(*a):
            raise RuntimeError("InductorError: C++ compile error")

        return run

    monkeypatch.setattr(torch, "compile", broken)
    ok, why = kernels.compile_status("cpu")
    assert not ok and "C++ compile error" in why and "default" in why


def test_reduce_overhead_failing_skips_that_mode_with_its_reason(monkeypatch):
    monkeypatch.setattr(compile_bench, "compile_status", lambda device, mode: (False, "cudagraphs: no"))
    modes, skipped = compile_bench.compile_modes("cuda")
    assert modes == ["default"] and skipped == {"compiled (reduce-overhead)": "cudagraphs: no"}
    monkeypatch.setattr(compile_bench, "compile_status", lambda device, mode: (True, ""))
    assert compile_bench.compile_modes("cuda") == (["default", "reduce-overhead"], {})
    assert compile_bench.compile_modes("cpu") == (["default"], {})  # CUDA graphs only on CUDA


def test_fusion_stops_before_measuring_when_torch_compile_cannot_build(monkeypatch):
    from mfulab.measure import calibration

    monkeypatch.setattr(
        fusion_bench, "compile_status", lambda device: (False, "torch.compile (default) broke")
    )
    monkeypatch.setattr(calibration, "get", lambda *a, **k: pytest.fail("measured before the check"))
    p = FusionParams.from_dict(_profile("fusion", "smoke"))
    with pytest.raises(RuntimeError, match="broke.*compiler toolchain"):
        fusion_bench.measure(p)


def test_attention_peak_is_read_with_no_earlier_gradients_alive(monkeypatch):
    """The allocator peak's baseline must not include the previous step's gradients (3·|q|
    understated on a GPU): when the peak is measured, q, k and v hold no gradient."""
    seen = []

    def fake_peak(p, name, seq_len, step, device, num_threads):
        q, k, v = step.__defaults__[1:]
        seen.append(all(t.grad is None for t in (q, k, v)))
        return {"step_added_bytes": 1, "method": "fake"}

    monkeypatch.setattr(fusion_bench, "_peak_added", fake_peak)
    smoke = _profile("fusion", "smoke", attn_seq_lens=[64], compile_attention_seq_lens=[])
    fusion_bench.measure_attention(FusionParams.from_dict(smoke).prepared())
    assert seen and all(seen)
