"""One calibration per machine: measured once, stored with its stamp, re-measured when the
measuring code or torch changed or on request, and read by the studies."""

import numpy as np
import pytest

from mfulab.errors import ParameterError
from mfulab.measure import calibration, timing
from mfulab.units import MIB

PARTS = ["matmul:fp32", "bandwidth"]


def _fail(*args, **kwargs):
    raise AssertionError("measured again although the calibration was up to date")


def test_measured_once_then_read(tmp_path, monkeypatch):
    first = calibration.get("smoke", device="cpu", parts=PARTS, root=tmp_path, machine="box")
    assert first["_meta"]["measured_now"] == PARTS
    path = tmp_path / "box" / "calibration" / "smoke.json"
    assert path.exists() and first["_meta"]["file"] == str(path)  # outside the repository: absolute
    assert first["matmul:fp32"]["best_flops_per_s"] > 0 and first["bandwidth"]["plateau_bytes_per_s"] > 0
    monkeypatch.setattr(timing, "matmul_ceiling", _fail)
    monkeypatch.setattr(timing, "memory_bandwidth", _fail)
    again = calibration.get("smoke", device="cpu", parts=PARTS, root=tmp_path, machine="box")
    assert again["_meta"]["measured_now"] == []
    assert again["matmul:fp32"] == first["matmul:fp32"] and again["bandwidth"] == first["bandwidth"]


@pytest.mark.parametrize("what", ["torch", "code_sha256", "refresh", "cpu generation"])
def test_stale_or_refreshed_calibration_is_measured_again(tmp_path, monkeypatch, what):
    calibration.get("smoke", device="cpu", parts=["matmul:fp32"], root=tmp_path, machine="box")
    calls = []
    real = timing.matmul_ceiling
    monkeypatch.setattr(timing, "matmul_ceiling", lambda **kw: calls.append(kw) or real(**kw))
    stamp = calibration._stamp
    if what == "torch":
        monkeypatch.setattr(calibration, "_stamp", lambda device: {**stamp(device), "torch": "9.9.9"})
    elif what == "code_sha256":
        monkeypatch.setattr(calibration, "code_sha256", lambda: "changed")
    elif what == "cpu generation":  # a VM's generic model name on a host of another generation
        other = {**stamp("cpu")["cpu"], "cpu_family": -1}
        monkeypatch.setattr(calibration, "_stamp", lambda device: {**stamp(device), "cpu": other})
    out = calibration.get(
        "smoke", device="cpu", parts=["matmul:fp32"], root=tmp_path, machine="box", refresh=what == "refresh"
    )
    assert len(calls) == 1 and out["_meta"]["measured_now"] == ["matmul:fp32"]


def test_bandwidth_is_a_plateau_beyond_the_cache():
    llc = calibration.last_level_cache_bytes("cpu")
    assert llc > 0
    for name in ("cpu", "gpu"):
        assert min(calibration.bandwidth_sizes(calibration.SETTINGS[name], llc)) >= 4 * llc
    bw = timing.memory_bandwidth(sizes_bytes=(1 << 20, 2 << 20, 3 << 20), min_run_time_s=0.02)
    per_size = [r["achieved_bytes_per_s"] for r in bw["rows"]]
    assert bw["plateau_bytes_per_s"] == pytest.approx(float(np.median(per_size)))
    assert bw["spread_between_sizes"] == pytest.approx(max(per_size) / min(per_size) - 1)


def test_bandwidth_sizes_respect_the_cache_floor():
    """A VM may report a last-level cache smaller than what serves its copies: the cpu setting's
    sizes are multiples of its floor then, of the reported cache above it."""
    cpu = calibration.SETTINGS["cpu"]
    floor = cpu["cache_floor_bytes"]
    small, large = floor // 8, floor * 2
    assert calibration.bandwidth_sizes(cpu, small) == tuple(m * floor for m in cpu["llc_multiples"])
    assert calibration.bandwidth_sizes(cpu, large) == tuple(m * large for m in cpu["llc_multiples"])
    assert calibration.bandwidth_sizes(calibration.SETTINGS["smoke"], large) == (4 * MIB,)


def test_settings_are_named():
    assert (
        calibration.setting_for("auto", "cuda") == "gpu" and calibration.setting_for("auto", "cpu") == "cpu"
    )
    with pytest.raises(ParameterError, match="calibration must be"):
        calibration.setting_for("huge", "cpu")


def test_collective_alpha_beta_is_a_part(tmp_path):
    key = calibration.collectives_key("cpu", 2)
    assert key == "collectives:gloox2"
    out = calibration.get("smoke", device="cpu", parts=[key], root=tmp_path, machine="box")[key]
    assert out["world_size"] == 2 and out["wrong"] == 0
    assert out["alpha_s"] >= 0 and out["link_bytes_per_s"] > 0


def test_studies_share_the_numbers(tmp_path, monkeypatch):
    """mfu reads the ceiling and bandwidth that fusion's parts read: one number per property."""
    from mfulab.studies.mfu import bench
    from mfulab.studies.mfu.params import Params

    monkeypatch.setenv("MFULAB_RESULTS_ROOT", str(tmp_path))
    monkeypatch.setenv("MACHINE", "box")
    p = Params(
        preset="tiny",
        seq_len=32,
        micro_batch=1,
        steps=1,
        warmup_steps=0,
        device="cpu",
        calibration="smoke",
        convention_presets=("tiny",),
        convention_seq_lens=(32,),
    )
    records = bench.measure(p)
    fusion_view = calibration.get("smoke", device="cpu", parts=["matmul:fp32", "matmul:bf16", "bandwidth"])
    assert fusion_view["_meta"]["measured_now"] == ["matmul:bf16"]  # only what mfu did not need
    assert (
        records["ceiling"] == fusion_view["matmul:fp32"] and records["bandwidth"] == fusion_view["bandwidth"]
    )


def test_every_rank_takes_rank_0s_calibration_so_they_agree_what_to_measure(tmp_path, tests_on_path):
    """Measuring a part runs collectives on the whole group: ranks that decide from their own
    copies (one per node) would wait in mismatched collectives until the timeout."""
    from mfulab.measure import launch

    out = launch.launch("workers:calibration_agreement", {"root": str(tmp_path)}, nproc=2, timeout_s=300)
    assert out["measured_now"] == [["matmul:fp32"], ["matmul:fp32"]]


@pytest.fixture
def h100_host(monkeypatch):
    import torch

    monkeypatch.delenv("MACHINE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")


def test_a_gloo_jobs_calibration_goes_to_the_hosts_folder_not_the_gpus(h100_host, tmp_path):
    from mfulab.measure import host

    cpu = calibration.path_for("cpu", root=tmp_path, device="cpu")
    assert cpu.parent.parent.name == host.machine_slug(device="cpu") != "h100-sxm"
    assert calibration.path_for("gpu", root=tmp_path, device="cuda").parent.parent.name == "h100-sxm"


def test_a_two_node_jobs_calibration_is_keyed_and_filed_by_the_jobs_ranks(h100_host, monkeypatch, tmp_path):
    for k, v in {"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "RANK": "0"}.items():
        monkeypatch.setenv(k, v)
    assert calibration.collectives_key("cuda", 8) == "collectives:ncclx16"
    assert calibration.path_for("gpu", root=tmp_path, device="cuda").parent.parent.name == "h100-sxm-2x8"
