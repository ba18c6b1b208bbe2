"""Launcher guarantees (timeouts, crashes, no orphans), collective definitions and the
α–β model, the correctness check of the collective benchmark, the overlap model."""

import os
import time

import pytest
import torch

from mfulab.analytic import comm
from mfulab.errors import ParameterError
from mfulab.measure import collectives, launch
from mfulab.studies.overlap import analysis as overlap
from mfulab.studies.overlap.params import Params as OverlapParams

from conftest import ROOT

pytestmark = pytest.mark.usefixtures("tests_on_path")  # the ranks import tests/workers.py


def test_bus_factors():
    assert comm.bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert comm.bus_factor(op, 4) == pytest.approx(3 / 4)
    assert comm.bus_factor("broadcast", 16) == 1 and comm.bus_factor("reduce", 2) == 1
    with pytest.raises(ParameterError):
        comm.bus_factor("gossip", 4)


def test_ring_model_by_hand():
    # 8 ranks, 1 GB, α = 10 µs, 100 GB/s: 14·10 µs + 1.75 · 10 ms
    t = comm.ring_all_reduce_time(1e9, 8, alpha_s=1e-5, link_bytes_per_s=1e11)
    assert t == pytest.approx(14e-5 + 1.75e-2)
    assert comm.ring_all_reduce_time(1e9, 1, alpha_s=1e-5, link_bytes_per_s=1e11) == 0
    assert comm.tree_all_reduce_time(1e9, 8, alpha_s=1e-5, link_bytes_per_s=1e11) == pytest.approx(
        6e-5 + 2e-2
    )


def test_fit_alpha_beta_recovers_parameters():
    sizes = [2**k for k in range(10, 28)]
    times = [comm.ring_all_reduce_time(s, 4, alpha_s=5e-5, link_bytes_per_s=3e9) for s in sizes]
    fit = comm.fit_alpha_beta(sizes, times, 4, "all_reduce")
    assert fit["alpha_s"] == pytest.approx(5e-5, rel=1e-6)
    assert fit["link_bytes_per_s"] == pytest.approx(3e9, rel=1e-6)


def test_correctness_check_catches_a_corrupted_result():
    good = collectives.expected_result("all_reduce", 4, 1000)
    assert collectives.count_wrong("all_reduce", good.clone(), 4) == 0
    bad = good.clone()
    bad[17] += 1
    bad[500] = float("nan")
    assert collectives.count_wrong("all_reduce", bad, 4) == 2
    gathered = collectives.expected_result("all_gather", 3, 9)
    assert gathered.tolist() == [1, 1, 1, 2, 2, 2, 3, 3, 3]


def test_overlap_model_bounds_and_u_shape():
    kw = dict(compute_s=0.02, nbytes=200e6, n=32, alpha_s=2e-5, link_bytes_per_s=25e9)
    serial = overlap.chunked_overlap(k=1, **kw)
    assert serial["step_s"] == pytest.approx(
        0.02 + comm.ring_all_reduce_time(200e6, 32, alpha_s=2e-5, link_bytes_per_s=25e9)
    )
    steps = []
    for k in (1, 2, 4, 8, 16, 64, 256, 1024):
        r = overlap.chunked_overlap(k=k, **kw)
        assert r["lower_bound_s"] - 1e-12 <= r["step_s"] <= r["upper_bound_s"] + 1e-12
        steps.append(r["step_s"])
    best = steps.index(min(steps))
    assert 0 < best < len(steps) - 1  # falls, then rises again: per-call latency
    # zero latency, fast link: the step approaches max(compute, comm)
    r = overlap.chunked_overlap(compute_s=0.02, nbytes=1e6, k=64, n=2, alpha_s=0.0, link_bytes_per_s=1e9)
    assert r["step_s"] == pytest.approx(0.02 + 1e6 / 1e9 / 64)


def test_launch_returns_rank0_records():
    out = launch.launch("workers:echo", {"value": 7}, nproc=2, timeout_s=120)
    assert out == {"rank": 0, "world": 2, "value": 7}


def _alive(pids):
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] != "Z":
                    alive.append(pid)
        except (ProcessLookupError, FileNotFoundError):
            pass
    return alive


def test_a_raising_worker_surfaces_its_traceback():
    t0 = time.time()
    with pytest.raises(launch.LaunchError, match="rank 1 fails on purpose"):
        launch.launch("workers:fail_on_rank_1", {}, nproc=2, timeout_s=120)
    assert time.time() - t0 < 60  # rank 0 was stopped, not waited for


def test_a_hanging_worker_is_killed_with_no_orphans(tmp_path):
    with pytest.raises(launch.LaunchError, match="timeout_s"):
        launch.launch("workers:hang", {"pid_dir": str(tmp_path)}, nproc=2, timeout_s=20)
    pids = [int(p.stem) for p in tmp_path.glob("*.pid")]
    assert len(pids) == 2
    time.sleep(0.5)
    assert _alive(pids) == []


def test_world_size_and_bad_parameters():
    with pytest.raises(ParameterError, match="nproc"):
        launch.check_world_size(0, "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ParameterError, match="GPUs"):
            launch.check_world_size(2, "cuda")
    import yaml

    params = yaml.safe_load((ROOT / "studies" / "overlap" / "smoke.yaml").read_text())
    OverlapParams.from_dict(params)
    for name, value, match in (
        ("chunks", [3], "does not split"),
        ("nproc", 1, "at least 2"),
        ("min_size_log2", 40, "min_size_log2"),
        ("ops", [], "ops"),
        ("modes", ["fast"], "modes"),
        ("max_size_log2", 5, "max_size_log2"),
        ("article_alpha_s", -1.0, "article_alpha_s"),
        ("compute_over_comm", 0, "compute_over_comm"),
        ("rounds", 2, "rounds"),
        ("timeout_s", "soon", "timeout_s"),
        ("device", "tpu", "device"),
    ):
        with pytest.raises(ParameterError, match=match):
            OverlapParams.from_dict({**params, name: value}).prepared()
    with pytest.raises(ParameterError, match="chunks"):
        OverlapParams(chunks=(3,))


def test_fit_alpha_beta_takes_each_term_from_its_regime():
    """A noisy mid-size point moves neither α (read at small sizes) nor B (at large ones)
    much, and the residuals stay in the caller's order."""
    sizes = [2**k for k in (24, 12, 14, 16, 18, 20, 22, 26)]
    times = [comm.ring_all_reduce_time(s, 2, alpha_s=1.5e-4, link_bytes_per_s=1.2e9) for s in sizes]
    noisy = list(times)
    noisy[5] *= 2.0  # 1 MiB took twice as long once
    fit = comm.fit_alpha_beta(sizes, noisy, 2, "all_reduce")
    assert fit["link_bytes_per_s"] == pytest.approx(1.2e9, rel=0.05)
    assert fit["alpha_s"] == pytest.approx(1.5e-4, rel=0.05)
    assert max(abs(r) for i, r in enumerate(fit["relative_residuals"]) if i != 5) < 0.2
    assert fit["relative_residuals"][5] < -0.3
