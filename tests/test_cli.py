"""The `python -m mfulab` commands end to end: the smoke notebook through papermill, bad
input refused before any work, failures leaving earlier results untouched."""

import json

import pytest
import torch

from mfulab import paths
from mfulab.errors import ParameterError
from mfulab.run import runner

EXPECTED_METRICS = {
    "matmul_ceiling_flops_per_s",
    "memory_bandwidth_bytes_per_s",
    "steady_mfu_vs_ceiling",
    "global_mfu_vs_ceiling",
    "local_mfu_vs_ceiling",
    "steady_tokens_per_s",
    "time_split_s",
    "peak",
    "claims",
    "flop_count_rel_diff",
    "flops_convention",
}
EXPECTED_FIGURES = {
    "attention_share.png",
    "step_timeline.png",
    "waterfall.png",
    "job_waterfall.png",
    "operator_steps.png",
}


def test_list(run_cli):
    out = run_cli("list")
    assert out.returncode == 0 and "mfu" in out.stdout and "smoke" in out.stdout


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    import os
    import subprocess
    import sys

    from conftest import ROOT

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mfulab",
            "run",
            "mfu",
            "--profile",
            "smoke",
            "--results-root",
            str(root),
            "-p",
            "steps",
            "4",
        ],
        cwd=ROOT,
        env={**os.environ, "MACHINE": "testbox"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    return root, proc


def test_smoke_notebook_produces_results(smoke_run):
    root, proc = smoke_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Executing Cell" in proc.stderr  # papermill --log-output progress reaches the log
    out = root / "testbox" / "mfu"
    metrics = json.loads((out / "metrics.json").read_text())
    assert EXPECTED_METRICS <= set(metrics)
    assert {c["id"] for c in metrics["claims"]} == {"A19", "B1", "B2", "B15", "B9", "A1"}
    assert abs(metrics["flop_count_rel_diff"]) < 0.005
    assert EXPECTED_FIGURES <= {p.name for p in (out / "figures").iterdir()}
    for png in (out / "figures").iterdir():
        assert png.stat().st_size <= 300_000
    (trace,) = (out / "traces").iterdir()  # the operator profile's trace, gzipped and capped
    assert trace.name.endswith(".json.gz") and trace.stat().st_size <= 2_000_000  # trace_max_bytes
    env = json.loads((out / "env.json").read_text())
    assert env["params"]["steps"] == 4  # the -p override reached the run
    assert env["params"]["seq_len"] == 64 and env["params"]["calibration"] == "smoke"
    assert set(env["inputs"]) >= {"notebook_sha256", "params", "library_sha256", "torch", "profile"}
    assert {"fingerprint", "git", "started", "finished", "peak"} <= set(env)
    assert (out / "01_mfu_accounting.ipynb").exists() and (out / "tables" / "claims.csv").exists()
    # no temporary folder left behind; the machine's calibration sits beside the study
    assert sorted(p.name for p in out.parent.iterdir()) == ["calibration", "mfu"]
    calibrated = json.loads((out.parent / "calibration" / "smoke.json").read_text())["parts"]
    measured = json.loads((out / "measurements.json").read_text())
    assert measured["ceiling"] == calibrated["matmul:fp32"]
    assert measured["bandwidth"] == calibrated["bandwidth"]


def test_measure_headless_then_analyse_from_folder(run_cli, tmp_path, smoke_run):
    meas = tmp_path / "cluster-run"
    proc = run_cli("measure", "mfu", "-f", "studies/mfu/smoke.yaml", "--out", str(meas))
    assert proc.returncode == 0, proc.stderr[-3000:]
    measure_log = proc.stdout + proc.stderr
    assert {"measurements.json", "env.json"} <= {p.name for p in meas.iterdir()}
    root = tmp_path / "results"
    # rendered with this machine's default profile (cpu): the measuring run's parameters stay
    proc = run_cli("run", "mfu", "--from", str(meas), "--results-root", str(root))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = root / "testbox" / "mfu"
    measured = json.loads((meas / "measurements.json").read_text())
    rendered = json.loads((out / "measurements.json").read_text())
    assert rendered == measured  # analysed, not re-measured
    env, measured_env = (
        json.loads((out / "env.json").read_text()),
        json.loads((meas / "env.json").read_text()),
    )
    assert env["measured_env"]["study"] == "mfu"
    assert env["params"] == measured_env["params"] and env["profile"] == "smoke"
    # a headless measurement records its time against the profile's budget (none for smoke)
    assert measured_env["measure_s"] > 0 and measured_env["budget_s"] is None
    assert "mfu/smoke measurement took" in measure_log


@pytest.mark.parametrize(
    "args,names",
    [
        (["run", "nosuch", "--profile", "smoke"], ["nosuch", "mfu"]),
        (["run", "mfu", "--profile", "huge"], ["huge", "smoke", "cpu"]),
        (["run", "mfu", "--profile", "smoke", "-p", "preset", "gpt5"], ["gpt5", "llama2-7b"]),
        (["run", "mfu", "--profile", "smoke", "-p", "sequence", "3"], ["sequence", "seq_len"]),
        (["run", "mfu", "--profile", "smoke", "-p", "steps", "2.5"], ["steps", "integer"]),
        (["run", "mfu", "--profile", "smoke", "-p", "seq_len", "0"], ["seq_len"]),
        (["run", "mfu", "--profile", "smoke", "-p", "micro_batch", "-4"], ["micro_batch"]),
        (["measure", "mfu", "-f", "studies/mfu/smoke.yaml", "-p", "steps", "0", "--out", "x"], ["steps"]),
    ],
)
def test_bad_input_stops_before_work_and_keeps_results(run_cli, tmp_path, args, names):
    existing = tmp_path / "testbox" / "mfu"
    existing.mkdir(parents=True)
    (existing / "metrics.json").write_text('{"kept": true}')
    proc = run_cli(*args, "--results-root", str(tmp_path)) if args[0] == "run" else run_cli(*args)
    assert proc.returncode == 2
    for name in names:
        assert name in proc.stderr
    assert "Executing Cell" not in proc.stderr
    assert json.loads((existing / "metrics.json").read_text()) == {"kept": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["testbox"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_gpu_profile_without_cuda_is_refused(run_cli, tmp_path):
    proc = run_cli("run", "mfu", "--profile", "gpu", "--results-root", str(tmp_path))
    assert proc.returncode == 2 and "CUDA is not available" in proc.stderr
    assert not any(tmp_path.iterdir())


def test_failing_notebook_leaves_previous_results(tmp_path, monkeypatch):
    monkeypatch.setenv("MACHINE", "testbox")
    existing = tmp_path / "testbox" / "mfu"
    existing.mkdir(parents=True)
    (existing / "metrics.json").write_text('{"kept": true}')
    broken = tmp_path / "broken.py"
    broken.write_text(
        '# %% tags=["parameters"]\nout_dir = ""\nfrom_dir = ""\n\n# %%\n'
        'open(out_dir + "/metrics.json", "w").write("half")\nraise RuntimeError("cell failed")\n'
    )
    from papermill.exceptions import PapermillExecutionError

    with pytest.raises(PapermillExecutionError, match="cell failed"):
        runner.run("mfu", profile="smoke", results_root=tmp_path, notebook=broken, kernel="python3")
    assert json.loads((existing / "metrics.json").read_text()) == {"kept": True}
    assert sorted(p.name for p in existing.parent.iterdir()) == ["mfu"]


def test_resolve_profile_and_overrides():
    assert paths.parse_overrides([["seq_len", "2048"], ["preset", "gpt2-124m"], ["sizes", "[1, 2]"]]) == {
        "seq_len": 2048,
        "preset": "gpt2-124m",
        "sizes": [1, 2],
    }
    assert runner.resolve_profile("mfu", "auto") in ("cpu", "gpu")
    with pytest.raises(ParameterError, match="valid profiles"):
        runner.resolve_profile("mfu", "nope")
