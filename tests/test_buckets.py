"""DDP bucket formation rules (against DDP itself), gradient equality, simulator edge cases."""

import pytest

from mfulab import comm, launch
from mfulab.config import ParameterError, preset
from mfulab.studies.buckets import analysis, bench, simulator
from mfulab.studies.buckets.params import Params

MIB = 2**20


def test_formation_rules():
    sizes = [3 * MIB, 1 * MIB, 2 * MIB, 5 * MIB, 1 * MIB]
    # a bucket closes once it reaches the cap; the crossing tensor stays in it; nothing is split
    assert simulator.form_buckets(sizes, bucket_cap_mb=4) == [[0, 1], [2, 3], [4]]
    assert simulator.form_buckets(sizes, bucket_cap_mb=1000) == [[0, 1, 2, 3, 4]]  # one bucket
    assert simulator.form_buckets(sizes, bucket_cap_mb=0.5) == [[0], [1], [2], [3], [4]]  # one tensor each
    # DDP's default cap uses a 1 MiB first bucket
    assert simulator.form_buckets(sizes, bucket_cap_mb=25, default_cap=True) == [[0], [1, 2, 3, 4]]
    with pytest.raises(ParameterError):
        simulator.form_buckets(sizes, bucket_cap_mb=0)


def test_zero_comm_cost_gives_compute_time():
    sizes = [MIB] * 10
    ready = [0.01 * (i + 1) for i in range(10)]
    r = simulator.simulate(
        sizes,
        ready,
        backward_end_s=0.1,
        bucket_cap_mb=2,
        n=8,
        alpha_s=0.0,
        link_bytes_per_s=float("inf"),
        forward_s=0.05,
    )
    assert r["step_s"] == pytest.approx(0.15) and r["exposed_comm_s"] == pytest.approx(0)


def test_one_bucket_starts_after_backward():
    sizes = [MIB] * 4
    ready = [0.01, 0.02, 0.03, 0.04]
    r = simulator.simulate(
        sizes, ready, backward_end_s=0.04, bucket_cap_mb=100, n=4, alpha_s=1e-4, link_bytes_per_s=1e9
    )
    t = comm.ring_all_reduce_time(4 * MIB, 4, alpha_s=1e-4, link_bytes_per_s=1e9)
    assert r["buckets"] == 1 and r["step_s"] == pytest.approx(0.04 + t)


def test_simulator_scale_layout():
    layout = simulator.model_layout(preset("llama2-70b"))
    assert len(layout) == 80 * 9 + 3  # 9 tensors per Llama block + embedding, final norm, head
    assert sum(n for _, n in layout) == 68_976_648_192  # the 70B parameter count
    speed = simulator.simulator_speed()
    assert speed["bucket_sizes"] == 20 and speed["tensors"] == 723


def test_ddp_layout_matches_rules_and_gradients_match_reference():
    spec = {
        "device": "cpu",
        "stack_layers": 4,
        "stack_hidden": 32,
        "batch": 4,
        "bucket_caps_mb": [0.0001, 0.005, 1],
        "variants": ["default", "static_graph"],
        "modes": ["real"],
        "emulated_layer_backward_s": 0.001,
        "reps": 2,
    }
    out = launch.launch(bench.WORKER, spec, nproc=2, timeout_s=300)
    records = {"params": {"stack_layers": 4, "stack_hidden": 32}, "ddp": out}
    check = analysis.layout_check(records)
    assert all(v["equal"] for v in check.values()), check
    assert check["real:0.0001:default"]["actual"] == [32 * 4, 32 * 32 * 4] * 4  # every tensor alone
    assert check["real:0.005:default"]["actual"] == [2 * (32 * 4 + 32 * 32 * 4)] * 2  # closes past the cap
    assert max(out["gradient_gate"].values()) < 1e-6


def test_worker_target_is_the_package():
    assert bench.WORKER == "mfulab.studies.buckets.bench:ddp_worker"
    assert launch._resolve(bench.WORKER) is bench.ddp_worker


def test_params():
    import yaml

    from conftest import ROOT

    params = yaml.safe_load((ROOT / "studies" / "buckets" / "smoke.yaml").read_text()) or {}
    Params.from_dict(params)
    for name, value, match in (
        ("bucket_caps_mb", [0], "bucket_caps_mb"),
        ("bucket_caps_mb", [-1, 2], "bucket_caps_mb"),
        ("nproc", 1, "at least 2"),
        ("variants", ["static_graph"], "default"),
        ("scale_world_sizes", [1], "scale_world_sizes"),
        ("scale_presets", ["no-such-model"], "scale_presets"),
        ("gpt_preset", "no-such-model", "gpt_preset"),
        ("scale_compute_efficiency", 1.5, "scale_compute_efficiency"),
        ("modes", ["simulated"], "modes"),
    ):
        with pytest.raises(ParameterError, match=match):
            Params.from_dict({**params, name: value})
    with pytest.raises(ParameterError, match="nproc"):
        Params(nproc=2.5)
    with pytest.raises(ParameterError, match="nproc"):  # more CPU processes than this machine allows
        Params(nproc=10_000).prepared()


def test_smoke_notebook(run_cli, tmp_path):
    import json

    proc = run_cli("run", "buckets", "--profile", "smoke", "--results-root", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((tmp_path / "testbox" / "buckets" / "metrics.json").read_text())
    assert metrics["layouts_match_simulator"] and metrics["gradient_gate_max_abs_diff"] < 1e-6
    assert metrics["best_bucket_cap_mb_real"] in (0.01, 1, 25)  # the smoke profile's caps
    assert {c["id"] for c in metrics["claims"]} >= {"A6", "B8", "B6"}
