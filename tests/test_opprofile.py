"""The operator profile (mfulab.measure.opprofile): categories that sum to a step's wall time, the name
rules, the device timeline, the exported trace and its size cap."""

import gzip
import json

import pytest

from mfulab import results
from mfulab.measure import opprofile, tracefile


def _ev(name, ts, dur, cat="cpu_op", tid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def test_rules_name_the_categories():
    assert opprofile.classify("aten::addmm")[0] == "matmul"
    assert opprofile.classify("autograd::engine::evaluate_function: MmBackward0")[0] == "matmul"
    assert opprofile.classify("aten::_scaled_dot_product_flash_attention_for_cpu")[0] == "attention core"
    assert opprofile.classify("aten::_log_softmax")[0] == "norm / elementwise"  # the loss, not attention
    assert opprofile.classify("aten::native_layer_norm")[0] == "norm / elementwise"
    assert opprofile.classify("Optimizer.step#AdamW.step") == ("optimizer", "context")
    assert opprofile.classify("gloo:all_reduce")[0] == "communication"
    assert opprofile.classify("ncclDevKernel_AllReduce_Sum_f32_RING_LL")[0] == "communication"
    assert opprofile.classify("Memcpy HtoD (Pageable -> Device)")[0] == "data / host-to-device"
    assert opprofile.classify("aten::broadcast_tensors")[0] is None  # not a collective
    assert set(opprofile.rules_table().category) == set(opprofile.CATEGORIES)


def test_cpu_split_self_times_contexts_and_idle():
    trace = {
        "traceEvents": [
            _ev("mfulab.step#0", 0, 1000, cat="user_annotation"),
            _ev("aten::linear", 10, 200),
            _ev("aten::t", 12, 20),  # unnamed: takes its parent's category
            _ev("aten::addmm", 40, 150),
            _ev("Optimizer.step#AdamW.step", 300, 300, cat="user_annotation"),
            _ev("aten::add_", 310, 100),  # inside the optimizer: optimizer time
            _ev("aten::mystery", 700, 50),  # no rule, no named ancestor
            _ev("aten::addmm", 300, 100, tid=2),  # another thread: not this step's
        ]
    }
    (step,) = opprofile.cpu_breakdown(trace)
    s = step["categories_s"]
    assert s["matmul"] == pytest.approx(200e-6)
    assert s["optimizer"] == pytest.approx(300e-6)
    assert s["other ops"] == pytest.approx(50e-6)
    assert s["idle"] == pytest.approx(450e-6)
    assert sum(s.values()) == pytest.approx(step["wall_s"]) == pytest.approx(1e-3)


def test_annotated_waits_and_checkpoints():
    trace = {
        "traceEvents": [
            _ev("mfulab.step#0", 0, 1000, cat="user_annotation"),
            _ev("mfulab.ddp_backward", 0, 500, cat="user_annotation"),
            _ev("aten::mm", 10, 300),  # inside the backward: still matmul
            _ev("aten::view", 320, 10),  # unnamed: does not inherit the backward's "self" rule
            _ev("mfulab.checkpoint", 600, 300, cat="user_annotation"),
            _ev("aten::copy_", 610, 100),
        ]
    }
    (step,) = opprofile.cpu_breakdown(trace)
    s = step["categories_s"]
    assert s["matmul"] == pytest.approx(300e-6)
    assert s["other ops"] == pytest.approx(10e-6)
    assert s["communication"] == pytest.approx(190e-6)  # the backward's own gaps
    assert s["checkpoint"] == pytest.approx(300e-6)
    assert s["idle"] == pytest.approx(200e-6)


def test_device_split_counts_only_exposed_communication():
    trace = {
        "traceEvents": [
            _ev("mfulab.step#0", 0, 1000, cat="user_annotation"),
            _ev("ampere_sgemm_128x64_nn", 100, 300, cat="kernel"),
            _ev("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 200, 400, cat="kernel"),
            _ev("Memcpy HtoD (Pageable -> Device)", 0, 50, cat="gpu_memcpy"),
        ]
    }
    (step,) = opprofile.device_breakdown(trace)
    s = step["categories_s"]
    assert s["matmul"] == pytest.approx(300e-6)
    assert s["communication"] == pytest.approx(200e-6)  # 400–600: the part no compute hides
    assert s["data / host-to-device"] == pytest.approx(50e-6)
    assert s["idle"] == pytest.approx(450e-6)
    assert sum(s.values()) == pytest.approx(1e-3)


@pytest.mark.parametrize(
    "kernel",
    [
        "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT",  # Hopper cuBLAS GEMMs (H100/H200)
        "nvjet_hsh_192x128_64x5_2x1_v_bz_coopB_TNN",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_nn_align8>",
    ],
)
def test_hopper_gemm_kernels_are_matmul(kernel):
    assert opprofile.classify(kernel)[0] == "matmul"


def test_cudnn_attention_kernels_are_attention():
    name = "cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0"
    assert opprofile.classify(name)[0] == "attention core"


def _cuda_trace_with_device_copies():
    """Two steps as kineto writes them on CUDA: the host annotation (user_annotation) and its
    copy on the GPU timeline (gpu_user_annotation, the kernels' span)."""
    events = []
    for k, t0 in enumerate((0, 2000)):
        events += [
            _ev(f"mfulab.step#{k}", t0, 1000, cat="user_annotation"),
            _ev(f"mfulab.step#{k}", t0 + 100, 700, cat="gpu_user_annotation", tid=7),
            _ev("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", t0 + 100, 600, cat="kernel", tid=7),
            _ev("void at::native::vectorized_elementwise_kernel<4>", t0 + 700, 100, cat="kernel", tid=7),
        ]
    return {"traceEvents": events}


def test_device_split_counts_each_step_once_not_its_gpu_annotation_copy():
    rows = opprofile.device_breakdown(_cuda_trace_with_device_copies())
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        assert r["wall_s"] == pytest.approx(1e-3)  # the host window, which the step's sync closes
        assert r["categories_s"]["matmul"] == pytest.approx(600e-6)
        assert r["categories_s"]["other ops"] == 0


def test_profile_steps_pairs_one_row_per_step_with_its_perf_counter_time(monkeypatch):
    """Kineto's device copies of the step annotation must not double the rows (notebook 01's
    op split then stopped with a KeyError on perf_counter_s)."""
    monkeypatch.setattr(
        opprofile, "cpu_breakdown", lambda trace: opprofile.device_breakdown(_cuda_trace_with_device_copies())
    )
    out = opprofile.profile_steps(lambda: None, steps=2, device="cpu")
    assert len(out["steps"]) == 2 and all("perf_counter_s" in r for r in out["steps"])


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory):
    """Two profiled steps of the tiny GPT with a data fetch and a one-rank gloo all-reduce."""
    import torch
    import torch.distributed as dist
    from torch.profiler import record_function

    from mfulab.analytic.config import preset
    from mfulab.measure.gpt import GPT

    tmp = tmp_path_factory.mktemp("prof")
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
    try:
        cfg = preset("tiny")
        torch.manual_seed(0)
        model = GPT(cfg, attn_impl="sdpa")
        opt = torch.optim.AdamW(model.parameters())

        def step():
            with record_function("data"):
                tokens = torch.randint(0, cfg.vocab_size, (4, cfg.seq_len + 1))
                x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
            _, loss = model(x, y)
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            opt.zero_grad()
            loss.item()

        prof = opprofile.profile_steps(step, steps=2, trace_path=tmp / "t.json.gz", max_trace_bytes=10**7)
    finally:
        dist.destroy_process_group()
    return prof, tmp / "t.json.gz"


def test_categories_sum_to_the_step_wall_time(tiny_profile):
    prof, _ = tiny_profile
    assert len(prof["steps"]) == 2
    for s in prof["steps"]:
        total = sum(s["categories_s"].values())
        assert total == pytest.approx(s["wall_s"], rel=1e-4)
        assert total == pytest.approx(s["perf_counter_s"], rel=0.02)  # the 2%
        for cat in ("matmul", "attention core", "norm / elementwise", "optimizer", "communication"):
            assert s["categories_s"][cat] > 0, cat
    assert sum(opprofile.category_shares(prof).values()) == pytest.approx(1)
    assert set(opprofile.top_ops(prof, n=50).category) >= {"matmul", "optimizer", "communication"}


def test_exported_trace_loads_and_has_every_category(tiny_profile):
    prof, path = tiny_profile
    trace = json.loads(gzip.decompress(path.read_bytes()))
    events = trace["traceEvents"]
    assert prof["trace"]["trimmed"] is False and prof["trace"]["events_kept"] == len(events)
    names = {e["name"] for e in events if e.get("ph") == "X"}
    assert {"mfulab.step#0", "mfulab.step#1"} <= names
    seen = {opprofile.classify(n)[0] for n in names}
    assert {"matmul", "attention core", "norm / elementwise", "optimizer", "communication"} <= seen
    assert "data / host-to-device" in seen


def test_trace_cap_trims_and_says_so(tiny_profile, tmp_path):
    _, path = tiny_profile
    trace = json.loads(gzip.decompress(path.read_bytes()))
    cap = len(path.read_bytes()) // 3
    note = tracefile.write_trace(trace, tmp_path / "small.json.gz", max_bytes=cap)
    small = json.loads(gzip.decompress((tmp_path / "small.json.gz").read_bytes()))
    assert note["trimmed"] and note["bytes"] <= cap and (tmp_path / "small.json.gz").stat().st_size <= cap
    assert small["mfulabTrimmed"]["events_kept"] == len(small["traceEvents"]) < len(trace["traceEvents"])
    assert any(e["name"].startswith(opprofile.STEP_PREFIX) for e in small["traceEvents"])


def test_results_keep_the_trace(tiny_profile, tmp_path):
    prof, _ = tiny_profile
    rel = results.save_trace(tmp_path, prof["trace"])
    assert (
        rel == "traces/t.json.gz"
        and (tmp_path / rel).read_bytes() == open(prof["trace"]["file"], "rb").read()
    )
    assert results.save_trace(tmp_path, {"file": str(tmp_path / "gone.json.gz")}) is None


def test_hta_summary_reports_instead_of_failing(tiny_profile):
    """On a CPU trace HolisticTraceAnalysis has no GPU timeline: the summary says why (or that it
    is not installed) and the study goes on."""
    _, path = tiny_profile
    summary = opprofile.hta_summary(path.parent)
    assert set(summary) >= {"available"}
    assert "why" in summary or "temporal_breakdown" in summary


def test_device_sweep_matches_the_instant_by_instant_split_on_many_overlapping_kernels():
    """The device split is one sorted sweep (a gpt2-774m step has thousands of kernels: testing
    every kernel at every edge was quadratic); it must give what the definition gives."""
    import random

    rng = random.Random(0)
    names = ["nvjet_tst_x", "flash_fwd_kernel", "vectorized_elementwise", "ncclDevKernel_AllReduce", "foo"]
    kernels = []
    for _ in range(300):
        s = rng.randrange(0, 9000)
        kernels.append(_ev(rng.choice(names), s, rng.randrange(1, 400), cat="kernel", tid=7))
    trace = {"traceEvents": [_ev("mfulab.step#0", 0, 10000, cat="user_annotation"), *kernels]}
    (row,) = opprofile.device_breakdown(trace)
    rank = {c: i for i, c in enumerate(opprofile.DEVICE_PRIORITY)}
    expected = dict.fromkeys(opprofile.CATEGORIES, 0.0)
    for t in range(10000):  # integer timestamps: every microsecond is one instant
        active = [
            opprofile.classify(k["name"])[0] or "other ops"
            for k in kernels
            if k["ts"] <= t and t + 1 <= min(k["ts"] + k["dur"], 10000)
        ]
        expected[min(active, key=rank.__getitem__) if active else "idle"] += 1e-6
    assert row["categories_s"] == pytest.approx(expected, abs=1e-9)


def test_trace_cap_gzips_a_few_times_not_once_per_level(tiny_profile, tmp_path, monkeypatch):
    """D10: the depth limit is chosen from one serialisation, so trimming gzips the trace a few
    times (the whole, the chosen limit, the final note), not once per nesting level."""
    _, path = tiny_profile
    trace = json.loads(gzip.decompress(path.read_bytes()))
    calls = []
    real = tracefile._gz
    monkeypatch.setattr(tracefile, "_gz", lambda t: calls.append(1) or real(t))
    cap = len(path.read_bytes()) // 3
    note = tracefile.write_trace(trace, tmp_path / "small.json.gz", max_bytes=cap)
    assert note["trimmed"] and note["bytes"] <= cap
    assert len(calls) <= 5
