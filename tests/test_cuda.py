"""CUDA-only branches, run with ``pytest -m "cuda or multigpu"`` on a GPU machine (``make
check-gpu``); here they skip with their reason. Each checks what only a GPU can show."""

import pytest

from mfulab.analytic import devices

from conftest import ROOT

pytestmark = pytest.mark.cuda


def test_this_gpu_is_in_the_device_table_or_refused_with_the_list():
    import torch

    from mfulab.errors import ParameterError

    name = torch.cuda.get_device_name(0)
    try:
        spec = devices.device_spec(name)
    except ParameterError as e:
        assert "known devices" in str(e)
        pytest.skip(f"{name!r} is not in the device table (refused, as it should be)")
    assert spec.flops_per_s["bf16"] > 0


def test_rank_info_names_the_gpus_pci_bus():
    from mfulab.measure import jobinfo

    info = jobinfo.rank_info("cuda")
    assert info["device"].startswith("cuda:") and len(info["pci_bus_id"].split(":")) == 3


@pytest.mark.multigpu
def test_nccl_job_through_the_launcher_records_every_rank(tmp_path, monkeypatch, tests_on_path):
    from mfulab.measure import jobinfo, launch

    log = tmp_path / "jobs.json"
    monkeypatch.setenv(jobinfo.JOB_LOG, str(log))
    out = launch.launch("workers:echo", {"value": 7}, nproc=2, device="cuda", timeout_s=300)
    assert out == {"rank": 0, "world": 2, "value": 7}
    (job,) = jobinfo.recorded_jobs(log)
    assert len({r["pci_bus_id"] for r in job["ranks"]}) == 2  # one GPU per rank


def test_triton_kernel_is_built_launched_and_checked_by_the_availability_check():
    pytest.importorskip("triton")
    from mfulab.studies.fusion.kernels import triton_status

    ok, why = triton_status("cuda")
    assert ok, why


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_torch_compile_builds_and_runs_on_this_gpu(mode):
    from mfulab.studies.fusion.kernels import compile_status

    ok, why = compile_status("cuda", mode)
    assert ok, why


@pytest.mark.slow
def test_recompute_runs_bf16_autocast_with_the_tf32_state_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("MFULAB_RESULTS_ROOT", str(tmp_path))
    records, _, _ = _smoke_on_cuda("recompute", dtype="bf16", attn_impl="sdpa")
    assert records["dtype"] == "bf16 autocast" and isinstance(records["tf32_matmul"], bool)
    assert {r["dtype"] for r in records["timing"]} == {"bf16 autocast"}


def test_a_triton_build_failure_skips_the_kernel_with_its_reason(monkeypatch):
    pytest.importorskip("triton")
    from mfulab.studies.fusion import kernels

    def broken():
        raise RuntimeError("ptxas failed")

    monkeypatch.setattr(kernels, "triton_ln_residual", broken)
    ok, why = kernels.triton_status("cuda")
    assert not ok and "ptxas failed" in why


@pytest.mark.multigpu
def test_overlap_on_nccl_has_real_comm_bars_sized_compute_and_a_compute_slowdown(tests_on_path):
    """CUDA events give the all-reduces their real width (a future completes at enqueue),
    real compute is sized from a calibration on the device, NCCL's cost to compute is measured."""
    from mfulab.measure import launch
    from mfulab.studies.overlap import bench

    spec = {
        "device": "cuda",
        "overlap_bytes": 64 * 2**20,
        "compute_over_comm": 2.0,
        "chunks": [1, 4],
        "modes": ["real"],
        "rounds": 3,
        "seed": 0,
    }
    out = launch.launch(
        "mfulab.studies.overlap.bench:overlap_worker", spec, nproc=2, device="cuda", timeout_s=600
    )
    assert out["wrong"] == 0 and out["in_flight_measured"]
    for row in out["rows"]:
        bars = sum(e["comm_end_s"] - e["comm_start_s"] for e in out["timelines"][f"real:{row['k']}"])
        assert bars > 0.5 * sorted(row["comm_only_times_s"])[1]
        assert 0.5 < sorted(row["compute_only_times_s"])[1] / out["compute_s"] < 2
        assert len(row["overlapped_compute_busy_s"]) == 3
    assert bench.CUDA_MM_SIZE >= 2048


def _smoke_on_cuda(study_id: str, **extra):
    import yaml

    from mfulab.studykit.registry import REGISTRY

    values = yaml.safe_load((ROOT / "studies" / study_id / "smoke.yaml").read_text()) or {}
    study = REGISTRY[study_id]
    p = study.params.from_dict({**values, "device": "cuda", **extra}).prepared()
    return study.measure_fn()(p), study.outcome_fn(), p


@pytest.mark.slow
@pytest.mark.parametrize("study_id", ["mfu", "fusion", "recompute", "dataloader"])
def test_every_single_gpu_study_measures_and_concludes_on_cuda(study_id, tmp_path, monkeypatch):
    """The CUDA branches of each study (TF32 state, SDPA kernels under the FLOP counter, bf16
    steps, Triton, torch.compile, CUDA profiler activity, allocator peaks, recompute gates,
    pinned non-blocking copies) run end to end on the smoke profile, and the analysis reads
    their records."""
    monkeypatch.setenv("MFULAB_RESULTS_ROOT", str(tmp_path))
    records, outcome, p = _smoke_on_cuda(study_id)
    assert records["device"] == "cuda"
    o = outcome(records, p)
    claims, metrics = o.claims, o.metrics
    assert claims and isinstance(metrics, dict)


def test_calibration_and_timing_on_cuda(tmp_path):
    from mfulab.measure import calibration, timing

    cal = calibration.get("smoke", device="cuda", parts=["matmul:bf16", "bandwidth"], root=tmp_path)
    # the smoke sizes (64³, 128³ matmuls; in-L2 copies) are launch-bound, a few µs per call: any
    # FLOP/s floor there measures Python's launch rate, not the GPU, so only that they ran
    assert cal["matmul:bf16"]["best_flops_per_s"] > 0 and cal["bandwidth"]["plateau_bytes_per_s"] > 0
    assert cal["matmul:bf16"]["best_size"] in (64, 128)
    import torch

    a = torch.randn(1024, 1024, device="cuda")
    t = timing.time_fn(lambda: a @ a, device="cuda", min_run_time_s=0.05)
    assert t.median_s > 0


@pytest.mark.multigpu
@pytest.mark.slow
@pytest.mark.parametrize("study_id", ["overlap", "buckets"])
def test_collective_studies_measure_and_conclude_over_nccl(study_id, tmp_path, monkeypatch, tests_on_path):
    monkeypatch.setenv("MFULAB_RESULTS_ROOT", str(tmp_path))
    records, outcome, p = _smoke_on_cuda(study_id, nproc=2)
    claims = outcome(records, p).claims
    assert claims


def test_allocator_peak_counts_what_a_step_adds_and_an_oom_is_a_point_that_does_not_fit():
    import torch

    from mfulab.measure import memprobe

    nbytes = 256 * 2**20
    kept = torch.empty(nbytes, dtype=torch.uint8, device="cuda")  # alive before: not in the step's peak
    fits = memprobe.cuda_peak_of(lambda: torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1))
    assert nbytes <= fits["step_added_bytes"] < 1.1 * nbytes and fits["before_bytes"] >= nbytes
    too_big = 2 * torch.cuda.get_device_properties(0).total_memory
    oom = memprobe.cuda_peak_of(lambda: torch.empty(too_big, dtype=torch.uint8, device="cuda"))
    assert oom["does_not_fit"] and oom["step_added_bytes"] is None
    del kept


def test_tf32_ceiling_restores_the_callers_tf32_setting():
    import torch

    from mfulab.measure import timing

    before = torch.backends.cuda.matmul.allow_tf32
    for setting in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = setting
        timing.matmul_ceiling(device="cuda", dtype="tf32", sizes=(512,), min_run_time_s=0.02)
        assert torch.backends.cuda.matmul.allow_tf32 is setting
    torch.backends.cuda.matmul.allow_tf32 = before


def test_flop_counter_sees_sdpa_on_cuda():
    """On CPU SDPA's flash kernel counts zero FLOPs; on CUDA its attention ops have formulas:
    naive and SDPA count the same FLOPs per token (within the causal-mask ops naive adds)."""
    from mfulab.analytic.config import preset
    from mfulab.studies.mfu.bench import flop_count

    out = flop_count(preset("tiny"), device="cuda")
    assert out["sdpa_attention_op_flops"] and sum(out["sdpa_attention_op_flops"].values()) > 0
    assert abs(out["sdpa_flops_per_token"] / out["naive_flops_per_token"] - 1) < 0.05


@pytest.mark.multigpu
def test_nccl_collectives_are_correct_for_every_op_and_size(tests_on_path):
    from mfulab.measure import launch

    spec = {
        "ops": ["all_reduce", "all_gather", "reduce_scatter", "broadcast"],
        "sizes_bytes": [2**12, 2**20, 2**26],
        "warmup": 2,
        "iters": 3,
        "device": "cuda",
    }
    out = launch.launch(
        "mfulab.measure.collectives:collective_benchmark_worker", spec, nproc=2, device="cuda"
    )
    assert len(out["rows"]) == 12 and all(r["wrong"] == 0 for r in out["rows"])
    assert all(r["calls_per_sample"] > 1 and r["busbw_bytes_per_s"] > 0 for r in out["rows"])


def test_host_link_and_device_copies_are_measured_and_checked():
    from mfulab.studies.parallelism.bench import copy_bandwidths

    out = copy_bandwidths(nbytes=64 * 2**20, iters=3)
    assert out["correct"] and out["device_to_device_bytes_per_s"] > out["host_to_device_bytes_per_s"] > 1e9


def test_hopper_and_ampere_gemm_kernels_profile_as_matmul():
    """Audit D9 on the device: a few large bf16 matmuls under torch.profiler land in the matmul
    category (Hopper's cuBLAS names its GEMMs nvjet_*, which once fell into "other ops")."""
    import torch

    from mfulab.measure import opprofile

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)

    def step():
        for _ in range(4):
            a @ a

    prof = opprofile.profile_steps(step, steps=2, device="cuda")
    for row in prof["steps"]:
        busy = {k: v for k, v in row["categories_s"].items() if k != "idle"}
        assert max(busy, key=busy.get) == "matmul", row["categories_s"]
        assert busy.get("other ops", 0.0) < 0.1 * busy["matmul"], row["categories_s"]
