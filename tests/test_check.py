"""``make check-gpu`` / ``make check-node``: their CPU-side parts run here (the GPU parts skip
with their reason), and the node checks catch what a wrong GPU run would show."""

import json
import subprocess
import sys

import pytest

from mfulab import paths, results
from mfulab.analytic import devices
from mfulab.run import check

from conftest import ROOT, run_check


def test_check_gpu_without_a_gpu_reports_and_skips_with_reasons(tmp_path):
    proc, parts = run_check("gpu", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = {p["name"]: (p["status"], p["detail"]) for p in parts}
    assert status["environment report"][0] == "ran"
    assert status["CUDA tests"][0] == "skipped" and "no CUDA" in status["CUDA tests"][1]
    single, collective = check._studies()
    assert single and collective
    for study in single:
        assert status[f"tiny cuda run: {study.id}"] == ("skipped", "no CUDA device")
    assert (tmp_path / "gpu" / "environment.json").exists()
    assert len(proc.stdout.strip().splitlines()) == len(parts) + 1  # one line per part + the summary


def _overlap_records(comm_bar_s: float, compute_s: float = 0.02, device: str = "cuda"):
    return {
        "device": device,
        "collectives": {"rows": [{"wrong": 0}]},
        "overlap": {
            "wrong": 0,
            "compute_s": 0.02,
            "rows": [
                {
                    "mode": "real",
                    "k": 4,
                    "comm_only_times_s": [0.01, 0.01, 0.01],
                    "compute_only_times_s": [compute_s] * 3,
                }
            ],
            "timelines": {"real:4": [{"comm_start_s": 0.0, "comm_end_s": comm_bar_s}]},
        },
    }


@pytest.mark.parametrize(
    "comm_bar_s,compute_s,device,problem",
    [
        (0.01, 0.02, "cuda", None),
        (0.0, 0.02, "cuda", "communication bars"),  # NCCL's future completes at enqueue: zero-width bars
        (0.0017, 0.02, "cuda", "communication bars"),  # 17% of the comm-only step: too short for events
        (0.0017, 0.02, "cpu", None),  # gloo, the last rank to arrive: only the exchange (CI, loaded)
        (0.00001, 0.02, "cpu", "communication bars"),  # a future timed to its enqueue, on any backend
        (0.01, 0.5, "cuda", "real compute 25.00×"),  # real compute sized by a guess
    ],
)
def test_overlap_checks_catch_zero_width_bars_and_missized_compute(comm_bar_s, compute_s, device, problem):
    from mfulab.studykit.registry import REGISTRY

    problems = REGISTRY["overlap"].node_checks_fn()(_overlap_records(comm_bar_s, compute_s, device))
    assert (problems == []) if problem is None else any(problem in p for p in problems), problems


def test_run_checks_catch_every_rank_writing_and_a_live_process_group(tmp_path):
    results.save_measurements(tmp_path, _overlap_records(0.01))
    results.write_json(tmp_path / results.ENV, {"ranks": [{"rank": 0}, {"rank": 1}]})
    log = "measurements written to x\nmeasurements written to x\nprocess group has NOT been destroyed"
    from mfulab.studykit.registry import REGISTRY

    checks = REGISTRY["overlap"].node_checks_fn()
    status, detail = check.run_checks(tmp_path, 0, log, 2, checks)
    assert status == "failed" and "printed 2 times" in detail and "not destroyed" in detail
    status, _ = check.run_checks(tmp_path, 0, "measurements written to x", 2, checks)
    assert status == "ran"


def test_memory_guard_passes_todays_gpu_profiles_and_refuses_one_that_would_run_out(monkeypatch):
    parts = check.memory_guard(card_bytes=80e9)
    modelled = [p for p in parts if p.status != "skipped"]
    assert {p.name for p in modelled} >= {"memory guard mfu/gpu", "memory guard recompute/gpu"}
    assert all(p.status == "ran" for p in modelled), [p.line() for p in modelled]
    # every profile that puts work on a GPU is modelled; only the host's gloo profiles are not
    skipped = [p for p in parts if p.status == "skipped"]
    assert skipped and all("host's cores" in p.detail for p in skipped), [p.line() for p in skipped]
    # the recompute gpu profile as it was: micro-batch 16 at seq 2048 in fp32 (75–78 GiB measured)

    real_read = paths.read_profile

    def old_profile(path):
        values = real_read(path)
        old = {"micro_batches": [2, 4, 8, 16], "dtype": "fp32"}
        return {**values, **old} if "recompute" in str(path) else values

    monkeypatch.setattr(check, "read_profile", old_profile)
    refused = {p.name: p for p in check.memory_guard(card_bytes=80e9)}["memory guard recompute/gpu"]
    assert refused.status == "failed" and "GiB" in refused.detail


# --- a one-GPU machine, simulated: torch's device count and the measuring subprocess stubbed


@pytest.fixture
def one_gpu(monkeypatch, tmp_path):
    """``check`` as on a one-GPU machine; every ``measure`` it would start is recorded instead."""
    started = []

    def fake_measure(study, out, overrides, *, torchrun_ranks=0, budget_s=check.STUDY_BUDGET_S):
        started.append((study, overrides, torchrun_ranks))
        return 0, "measurements written to x", tmp_path / study

    monkeypatch.setattr(check, "_gpus", lambda: 1)
    monkeypatch.setattr(check, "_measure", fake_measure)
    return started


def test_parallelism_is_multi_rank_so_check_gpu_never_runs_it_on_one_gpu(one_gpu, tmp_path):
    single, collective = check._studies()
    assert "parallelism" in [s.id for s in collective] and "parallelism" not in [s.id for s in single]
    parts = {p.name: p for p in check.tiny_study_runs(tmp_path, 1)}
    assert "parallelism" not in [study for study, _, _ in one_gpu]
    assert parts["tiny cuda run: parallelism"].status == "skipped"
    assert "check-node" in parts["tiny cuda run: parallelism"].detail
    assert {s for s, _, _ in one_gpu} == {s.id for s in single}


def test_check_node_runs_parallelism_with_its_own_rank_count(one_gpu, monkeypatch, tmp_path):
    monkeypatch.setattr(check, "run_checks", lambda dest, code, log, ranks, checks: ("ran", f"{ranks}"))
    parts = list(check.node_parts(tmp_path, 8))
    par = [p for p in parts if p.name.startswith("parallelism")]
    assert [p.name for p in par] == ["parallelism, 2 ranks, launcher"], par
    assert ("parallelism", {"device": "cuda"}, 0) in one_gpu  # no nproc override: not a field
    assert ("overlap", {"device": "cuda", "nproc": 8}, 8) in one_gpu


def test_cuda_tests_collect_test_cuda_only(monkeypatch, tmp_path):
    ran = []
    monkeypatch.setattr(check, "_gpus", lambda: 1)
    monkeypatch.setattr(check, "_run", lambda cmd, out, name, cap: ran.append((cmd, cap)) or (0, "3 passed"))
    part = check.cuda_tests(tmp_path, cap_s=150)
    assert part.status == "ran" and ran[0][0][-1] == "tests/test_cuda.py" and ran[0][1] == 150
    # --quick leaves out the slow tests (cold compiles, study smoke runs: over its 150 s cap)
    check.cuda_tests(tmp_path, cap_s=150, quick=True)
    assert "(cuda or multigpu) and not slow" in ran[1][0]
    assert "cuda or multigpu" in ran[0][0] and not any("slow" in a for a in ran[0][0])


def test_quick_selection_keeps_fast_cuda_tests_and_drops_every_slow_one():
    """Collected here (no GPU), the --quick marker expression still selects the fast CUDA tests
    and none marked slow."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        + ["-m", "(cuda or multigpu) and not slow", "tests/test_cuda.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    kept = [line for line in proc.stdout.splitlines() if "::" in line]
    assert kept and not any("every_single_gpu_study" in k or "torch_compile" in k for k in kept), kept


BLOCKER = """
import importlib.abc, sys
BLOCKED = {"tornado", "jupytext", "papermill", "nbformat", "webdataset", "jupyter_client", "ipykernel"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
sys.meta_path.insert(0, Block())
"""


def test_a_bare_gpu_image_collects_the_cuda_tests_and_skips_jupyter_modules(tmp_path):
    """The lent GPU image has no Jupyter stack and no webdataset: test_cuda.py must collect there,
    and the modules that need Jupyter packages skip themselves at import (no collection error)."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{ROOT / 'lib'}"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        + ["tests/test_cuda.py", "tests/test_lab.py", "tests/test_studies.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "error" not in proc.stdout.splitlines()[-1].lower(), proc.stdout[-2000:]
    assert "tests/test_cuda.py::" in proc.stdout


def test_environment_fails_when_nvidia_smi_lists_gpus_that_torch_cannot_use(monkeypatch, tmp_path):
    monkeypatch.setattr(check, "nvidia_smi_gpus", lambda: 8)
    monkeypatch.setattr(check, "_gpus", lambda: 0)
    part = check.environment_report(tmp_path)
    assert part.status == "failed" and "nvidia-smi lists 8 GPU(s)" in part.detail
    monkeypatch.setattr(check, "nvidia_smi_gpus", lambda: 0)
    assert check.environment_report(tmp_path).status == "ran"


def test_tf32_overrides_are_recorded_and_an_fp32_ceiling_above_the_datasheet_is_flagged(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    part = check.environment_report(tmp_path)
    report = json.loads((tmp_path / "environment.json").read_text())
    assert (
        report["tf32_overrides"] == {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"} and "TF32 forced" in part.detail
    )
    from mfulab.measure import jobinfo

    assert "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE" in jobinfo.result_environment()
    peak = devices.peak_flops_per_s("h200", "fp32")
    assert check.fp32_ceiling_problem(0.9 * peak, "h200") is None
    problem = check.fp32_ceiling_problem(3 * peak, "h200")
    assert "above the fp32 datasheet peak" in problem and "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE" in problem


def test_a_timed_out_part_leaves_no_process_behind(tmp_path):
    """The part starts a grandchild in a session of its own (as the launcher starts torchrun)."""
    pidfile = tmp_path / "pid"
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen(['sleep', '300'], start_new_session=True); "
        f"open({str(pidfile)!r}, 'w').write(str(p.pid)); "
        "time.sleep(300)"
    )
    rc, log = check._run([sys.executable, "-c", code], tmp_path, "hang", timeout_s=3)
    assert rc == 124 and "stopped after 3 s" in log
    from mfulab.measure import procs

    deadline = __import__("time").monotonic() + 5
    while procs.alive(int(pidfile.read_text())) and __import__("time").monotonic() < deadline:
        __import__("time").sleep(0.1)
    assert not procs.alive(int(pidfile.read_text()))


def test_parts_write_their_calibrations_under_the_check_folder(tmp_path):
    rc, log = check._run(
        [sys.executable, "-c", "import os; print(os.environ['MFULAB_RESULTS_ROOT'])"], tmp_path, "env", 60
    )
    assert rc == 0 and log.strip() == str(tmp_path / "results")


def test_quick_prints_each_part_as_it_finishes_and_runs_three_tiny_runs(
    one_gpu, monkeypatch, tmp_path, capsys
):
    from mfulab.run.check import Part

    monkeypatch.setattr(check, "environment_report", lambda out: Part("environment report", "ran"))
    monkeypatch.setattr(check, "probes", lambda out: Part("probes", "ran"))
    caps = []
    monkeypatch.setattr(
        check, "cuda_tests", lambda out, cap, quick=False: caps.append(cap) or Part("CUDA tests", "ran")
    )
    assert check.main("gpu", tmp_path, quick=True) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("environment report") and lines[1].startswith("probes")
    quick = {s.id for s in check._studies()[0] if s.check_quick}
    assert {s for s, _, _ in one_gpu} == quick and 0 < len(quick) < len(check._studies()[0])
    assert caps[0] <= check.CUDA_TESTS_S["quick"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary) == len(lines) - 1


def test_memory_guard_models_the_buckets_node_profiles_every_live_ddp_replica():
    """Every DDP configuration of the node/cluster profile stays alive for the interleaved rounds
    (14 of them + the reference): at 48 × 4096² that was about 145 GB per GPU, unseen by the
    guard, which skipped buckets as not modelled."""
    parts = {p.name: p for p in check.memory_guard(card_bytes=80e9)}
    for name in ("memory guard buckets/node", "memory guard buckets/cluster"):
        assert parts[name].status == "ran", parts[name].line()
    from mfulab.studykit.registry import REGISTRY

    wide = REGISTRY["buckets"].params.from_dict({"device": "cuda", "stack_layers": 48, "stack_hidden": 4096})
    wide = wide.from_dict({**wide.to_dict(), "bucket_caps_mb": [0.001, 1, 5, 10, 25, 50, 100, 200, 1000]})
    assert wide.predicted_peak_bytes() > 130e9
    # the GPT phase is modelled too: a small stack with a large reference GPT is priced by the GPT
    small = REGISTRY["buckets"].params.from_dict({"device": "cuda", "stack_layers": 2, "stack_hidden": 256})
    big_gpt = small.from_dict(
        {**small.to_dict(), "gpt_preset": "gpt2-774m", "gpt_seq_len": 1024, "gpt_batch": 8}
    )
    assert big_gpt.predicted_peak_bytes() > 2 * 3 * 4 * 7e8 > small.predicted_peak_bytes()


def test_the_documented_first_command_runs_here(tmp_path):
    """docs/first-gpu-run.md's first command, as written there (no venv needed: PYTHONPATH=lib)."""
    doc = (ROOT / "docs" / "first-gpu-run.md").read_text()
    command = "PYTHONPATH=lib python3 -m mfulab check gpu --quick --out scratch/check-gpu-quick"
    assert command in doc
    proc = subprocess.run(
        [sys.executable, "-m", "mfulab", "check", "gpu", "--quick", "--out", str(tmp_path / "q")],
        cwd=ROOT,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "lib")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = [p["name"] for p in json.loads((tmp_path / "q" / "summary.json").read_text())]
    assert names[:3] == ["environment report", "probes", "CUDA tests"]
    assert not any(n.startswith("profile ") or n.startswith("memory guard") for n in names)


def test_probes_flag_tf32_in_disguise_and_report_a_cuda_error_as_a_failed_part(monkeypatch, tmp_path):
    import torch

    from mfulab.measure import timing

    peak = devices.peak_flops_per_s("h200", "fp32")
    monkeypatch.setattr(check, "_gpus", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    speed = {"fp32": 3 * peak, "bf16": 7e14}
    monkeypatch.setattr(timing, "matmul_ceiling", lambda dtype, **kw: {"best_flops_per_s": speed[dtype]})
    part = check.probes(tmp_path)
    assert part.status == "failed" and "above the fp32 datasheet peak" in part.detail
    speed["fp32"] = 0.8 * peak
    part = check.probes(tmp_path)
    assert part.status == "ran" and part.detail.startswith("h200")

    def broken(**kw):
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device")

    monkeypatch.setattr(timing, "matmul_ceiling", broken)
    part = check.probes(tmp_path)
    assert part.status == "failed" and "no kernel image" in part.detail


def _simulated_cuda(monkeypatch, count: int, total_memory: float = 141e9):
    """torch as on a machine with ``count`` H200s (nothing runs on them here)."""
    import types

    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    props = types.SimpleNamespace(total_memory=total_memory, name="NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: props)


def test_full_check_gpu_rehearsed_on_a_simulated_one_gpu_h200(one_gpu, monkeypatch, tmp_path, capsys):
    """The whole `check gpu` (not --quick) on one simulated H200: every gpu profile validated
    against one GPU (the multi-GPU ones skipped with their reason, never failed), every modelled
    profile under the memory guard on a 141 GB card, a tiny run of every single-GPU study."""
    from mfulab.run.check import Part

    _simulated_cuda(monkeypatch, 1)
    monkeypatch.setattr(check, "environment_report", lambda out: Part("environment report", "ran"))
    monkeypatch.setattr(check, "probes", lambda out: Part("probes", "ran"))
    monkeypatch.setattr(check, "cuda_tests", lambda out, cap, quick=False: Part("CUDA tests", "ran"))
    assert check.main("gpu", tmp_path) == 0, capsys.readouterr().out
    parts = {p["name"]: p for p in json.loads((tmp_path / "summary.json").read_text())}
    profiles = {n: p for n, p in parts.items() if n.startswith("profile ")}
    assert profiles and all(p["status"] in ("ran", "skipped") for p in profiles.values())
    assert profiles["profile parallelism/node"]["status"] == "skipped"
    assert profiles["profile mfu/gpu"]["status"] == "ran"
    guard = {n: p for n, p in parts.items() if n.startswith("memory guard")}
    assert (
        guard["memory guard recompute/gpu"]["status"] == "ran"
        and "141 GB" in guard["memory guard recompute/gpu"]["detail"]
    )
    single = {s.id for s in check._studies()[0]}
    assert {s for s, _, _ in one_gpu} == single


def test_check_node_rehearsed_on_eight_simulated_gpus(one_gpu, monkeypatch, tmp_path, capsys):
    """`check node` on a simulated 8-GPU node: every multi-rank study through the launcher and
    through torchrun, at 8 NCCL ranks where the study has an nproc field."""
    from mfulab.run.check import Part

    _simulated_cuda(monkeypatch, 8, total_memory=80e9)
    monkeypatch.setattr(check, "_gpus", lambda: 8)
    monkeypatch.setattr(check, "environment_report", lambda out: Part("environment report", "ran"))
    monkeypatch.setattr(check, "run_checks", lambda dest, code, log, ranks, checks: ("ran", f"{ranks} ranks"))
    assert check.main("node", tmp_path) == 0, capsys.readouterr().out
    collective = {s.id for s in check._studies()[1]}
    assert {s for s, _, _ in one_gpu} == collective
    assert ("overlap", {"device": "cuda", "nproc": 8}, 8) in one_gpu  # through torchrun
    assert ("buckets", {"device": "cuda", "nproc": 8}, 0) in one_gpu  # through the launcher
