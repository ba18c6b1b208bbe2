"""``make check-gpu`` / ``make check-node``: their CPU-side parts run here (the GPU parts skip
with their reason), and the node checks catch what a wrong GPU run would show."""

import json
import subprocess
import sys

import pytest

from mfulab import check, results

from conftest import ROOT


def _check(kind, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "mfulab", "check", kind, "--out", str(tmp_path / kind)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return proc, json.loads((tmp_path / kind / "summary.json").read_text())


def test_check_gpu_without_a_gpu_reports_and_skips_with_reasons(tmp_path):
    proc, parts = _check("gpu", tmp_path)
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


def test_check_node_rehearses_every_node_check_on_cpu(tmp_path):
    proc, parts = _check("node", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    node = [p for p in parts if p["name"] != "environment report"]
    _, collective = check._studies()
    assert [p["name"] for p in node] == [
        f"{s.id}, 2 ranks, {path}" for s in collective for path in ("launcher", "in-process torchrun")
    ]
    assert all(p["status"] == "ran" and "gloo rehearsal" in p["detail"] for p in node), node


def _overlap_records(comm_bar_s: float, compute_s: float = 0.02):
    return {
        "device": "cuda",
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
    "comm_bar_s,compute_s,problem",
    [
        (0.01, 0.02, None),
        (0.0, 0.02, "communication bars"),  # NCCL's future completes at enqueue: zero-width bars
        (0.01, 0.5, "real compute 25.00×"),  # real compute sized by a guess
    ],
)
def test_overlap_checks_catch_zero_width_bars_and_missized_compute(comm_bar_s, compute_s, problem):
    from mfulab.studies import REGISTRY

    problems = REGISTRY["overlap"].node_checks_fn()(_overlap_records(comm_bar_s, compute_s))
    assert (problems == []) if problem is None else any(problem in p for p in problems), problems


def test_run_checks_catch_every_rank_writing_and_a_live_process_group(tmp_path):
    results.save_measurements(tmp_path, _overlap_records(0.01))
    results.write_json(tmp_path / results.ENV, {"ranks": [{"rank": 0}, {"rank": 1}]})
    log = "measurements written to x\nmeasurements written to x\nprocess group has NOT been destroyed"
    from mfulab.studies import REGISTRY

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
    # the recompute gpu profile as it was: micro-batch 16 at seq 2048 in fp32 (75–78 GiB measured)
    from mfulab import runner

    real_read = runner.read_profile

    def old_profile(path):
        values = real_read(path)
        old = {"micro_batches": [2, 4, 8, 16], "dtype": "fp32"}
        return {**values, **old} if "recompute" in str(path) else values

    monkeypatch.setattr(runner, "read_profile", old_profile)
    refused = {p.name: p for p in check.memory_guard(card_bytes=80e9)}["memory guard recompute/gpu"]
    assert refused.status == "failed" and "GiB" in refused.detail
