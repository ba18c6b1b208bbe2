"""What a run records about its ranks and environment (nccl-tests style), plain srun refused,
and the in-process path under a real 2-rank ``torchrun`` on CPU: every rank exits 0, only
rank 0 writes and says so, the process group is torn down."""

import json
import os
import subprocess
import sys

import pytest

from mfulab.errors import ParameterError
from mfulab.measure import host, jobinfo, launch

from conftest import ROOT


def test_result_environment_keeps_what_changes_results():
    env = {
        "NCCL_ALGO": "Ring",
        "TORCH_NCCL_BLOCKING_WAIT": "1",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "OMP_NUM_THREADS": "4",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/x",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "MALLOC_ARENA_MAX": "2",
        "HOME": "/root",
        "PATH": "/bin",
    }
    kept = jobinfo.result_environment(env)
    assert set(kept) == set(env) - {"HOME", "PATH"}


def test_rank_info_names_host_pid_and_device(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    info = jobinfo.rank_info("cpu")
    assert info["rank"] == 3 and info["local_rank"] == 1 and info["pid"] == os.getpid()
    assert info["host"] and info["device"] == "cpu"


def test_record_job_appends_to_the_runners_log(tmp_path, monkeypatch):
    log = tmp_path / "jobs.json"
    monkeypatch.setenv(jobinfo.JOB_LOG, str(log))
    jobinfo.record_job([{"rank": 0}, {"rank": 1}], what="a")
    jobinfo.record_job([{"rank": 0}], what="b")
    assert [(j["what"], j["world_size"]) for j in jobinfo.recorded_jobs(log)] == [("a", 2), ("b", 1)]
    monkeypatch.setenv(jobinfo.JOB_LOG, str(tmp_path / "gone" / "jobs.json"))
    jobinfo.record_job([{"rank": 0}], what="after the run")  # the run's folder is gone: no error
    assert jobinfo.recorded_jobs(tmp_path / "gone" / "jobs.json") == []


def test_plain_srun_of_several_tasks_is_refused():
    with pytest.raises(ParameterError, match="torchrun"):
        launch.refuse_plain_srun({"SLURM_STEP_NUM_TASKS": "8", "SLURM_PROCID": "3", "SLURM_NTASKS": "8"})
    launch.refuse_plain_srun({"SLURM_STEP_NUM_TASKS": "1"})  # one task: a standalone job is right
    launch.refuse_plain_srun({"SLURM_STEP_NUM_TASKS": "16", "RANK": "3"})  # torchrun under srun


def test_launched_jobs_record_every_rank(tmp_path, monkeypatch, tests_on_path):
    log = tmp_path / "jobs.json"
    monkeypatch.setenv(jobinfo.JOB_LOG, str(log))
    launch.launch("workers:echo", {"value": 1}, nproc=2, timeout_s=120)
    (job,) = jobinfo.recorded_jobs(log)
    assert [r["rank"] for r in job["ranks"]] == [0, 1]
    assert len({r["pid"] for r in job["ranks"]}) == 2


def test_in_process_path_under_torchrun_tears_down_and_only_rank_0_writes(tmp_path):
    out = tmp_path / "out"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "lib"),
        "MFULAB_RESULTS_ROOT": str(tmp_path / "results"),
        "MFULAB_NO_REEXEC": "1",
        "OMP_NUM_THREADS": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        "localhost:0",
        "-m",
        "mfulab",
        "measure",
        "overlap",
        "-f",
        str(ROOT / "studies" / "overlap" / "smoke.yaml"),
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert log.count("measurements written to") == 1, log[-4000:]
    assert "has NOT been destroyed" not in log
    env_json = json.loads((out / "env.json").read_text())
    assert [r["rank"] for r in env_json["ranks"]] == [0, 1]
    assert env_json["environment"]["OMP_NUM_THREADS"] == "1"
    assert env_json["command"] and "nvidia" in env_json  # None where there is no nvidia-smi
    assert (out / "measurements.json").exists()


def _run_sbatch(tmp_path, extra_env):
    """Run studies/cluster.sbatch as Slurm would, with srun and scontrol replaced by stubs that
    print their arguments; returns what srun was asked to run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/bash\necho "SRUN $*"\n')
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho node-a; echo node-b\n")
    python = tmp_path / "venv-python"
    python.write_text("#!/bin/bash\n")
    for f in (bin_dir / "srun", bin_dir / "scontrol", python):
        f.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "node-[a-b]",
        "SLURM_NNODES": "2",
        "SLURM_CPUS_PER_TASK": "16",
        "PYTHON": str(python),
        **extra_env,
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "studies" / "cluster.sbatch")], cwd=ROOT, env=env, capture_output=True, text=True
    )
    return proc


def test_cluster_sbatch_passes_cpus_python_and_gpus_to_every_node(tmp_path):
    proc = _run_sbatch(tmp_path, {"SLURM_GPUS_ON_NODE": "8"})  # --gres=gpu:8: no SLURM_GPUS_PER_NODE
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("SRUN")]
    assert "--cpus-per-task=16" in line and "--ntasks-per-node=1" in line
    assert f"{tmp_path / 'venv-python'} -m torch.distributed.run" in line  # not a torchrun from PATH
    assert "--nproc_per_node 8" in line and "--nnodes 2" in line and "node-a:29500" in line
    assert "-m mfulab measure overlap -f studies/overlap/" in line


def test_cluster_sbatch_says_what_is_missing(tmp_path):
    proc = _run_sbatch(tmp_path, {})  # no GPU count from Slurm
    assert proc.returncode == 2 and "GPUS_PER_NODE" in proc.stderr
    assert subprocess.run(["bash", "-n", str(ROOT / "studies" / "cluster.sbatch")]).returncode == 0


def _make_dry_run(*args):
    proc = subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_wheelhouse_downloads_in_one_resolution_and_env_installs_offline(tmp_path):
    fetch = _make_dry_run("wheelhouse", f"WHEELHOUSE={tmp_path}/wh")
    (line,) = [ln for ln in fetch.splitlines() if "pip download" in ln]
    assert "setuptools" in line and ".[test]" in line and "torch" in line  # build backend + project + torch
    offline = _make_dry_run("env", f"VENV={tmp_path}/venv", f"WHEELS={tmp_path}/wh")
    installs = [ln for ln in offline.splitlines() if "pip install" in ln]
    assert installs and all(f"--no-index --find-links {tmp_path}/wh" in ln for ln in installs)


def test_world_size_check_in_process_follows_torchrun_not_the_profile(monkeypatch):
    """Under torchrun a profile's nproc is not used: a 4-GPU node or one GPU bound per task is
    not refused for an 8-rank profile; more local ranks than GPUs is."""
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    with pytest.raises(ParameterError, match="needs 8 GPUs"):
        launch.check_world_size(8, "cuda")  # the launcher would start 8 ranks here
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    launch.check_world_size(8, "cuda")  # 2 nodes × 4 GPUs
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    launch.check_world_size(8, "cuda")  # Slurm binds one GPU per task
    assert launch.cuda_index() == 0
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ParameterError, match="4 ranks on this node"):
        launch.check_world_size(8, "cuda")


@pytest.fixture
def h100(monkeypatch):
    """torch as on an H100 node (the device name is all the machine slug reads)."""
    import torch

    monkeypatch.delenv("MACHINE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")


@pytest.mark.parametrize(
    "world,local,machine",
    [("16", "8", "h100-sxm-2x8"), ("8", "8", "h100-sxm-x8"), ("4", "2", "h100-sxm-2x2")],
)
def test_a_torchrun_jobs_machine_folder_names_its_nodes_and_ranks(h100, monkeypatch, world, local, machine):
    """Inside torchrun the job decides, not the profile's nproc: a two-node 16-rank job of the
    cluster profile (nproc 8) was filed as h100-sxm-x8, the single node's folder."""
    for k, v in {"WORLD_SIZE": world, "LOCAL_WORLD_SIZE": local, "RANK": "0"}.items():
        monkeypatch.setenv(k, v)
    assert host.job_machine({"device": "cuda", "nproc": 8}) == machine


def test_outside_torchrun_the_profile_decides(h100, monkeypatch):
    for k in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK"):
        monkeypatch.delenv(k, raising=False)
    assert host.job_machine({"device": "cuda", "nproc": 8}) == "h100-sxm-x8"
    assert host.job_machine({"device": "cuda"}) == "h100-sxm"


def _env(hosts: int, ranks: int) -> dict:
    return {"ranks": [{"rank": r, "host": f"node{r * hosts // ranks}"} for r in range(ranks)]}


def test_job_shape_reads_in_process_ranks_and_launched_jobs():
    assert host.job_shape(_env(2, 16)) == (2, 16)
    assert host.job_shape({"ranks": [], "jobs": [{"world_size": 8, **_env(1, 8)}]}) == (1, 8)
    assert host.job_shape({}) is None and host.job_shape(None) is None


def test_rendering_never_replaces_results_of_another_rank_or_node_count(tmp_path, h100):
    """A two-node run rendered with make overlap FROM=DIR into a folder that holds the
    single-node run is refused (its env.json may still say h100-sxm-x8: written before the fix)."""
    from mfulab import results
    from mfulab.run import runner
    from mfulab.studykit.registry import REGISTRY

    single = tmp_path / "results" / "h100-sxm-x8" / "overlap"
    single.mkdir(parents=True)
    results.write_json(single / results.ENV, {"measured_env": _env(1, 8)})
    measured = tmp_path / "two-nodes"
    measured.mkdir()
    results.save_measurements(measured, {"device": "cuda"})
    params = REGISTRY["overlap"].params.from_dict({}).to_dict()
    results.write_json(measured / results.ENV, {"params": params, "machine": "h100-sxm-x8", **_env(2, 16)})
    with pytest.raises(ParameterError, match="16 ranks over 2 node"):
        runner.run("overlap", from_dir=measured, results_root=tmp_path / "results")
    assert results.read_json(single / results.ENV) == {"measured_env": _env(1, 8)}


def test_a_local_run_never_replaces_results_of_another_rank_count_and_keeps_its_own(tmp_path):
    """Audit D29's gap: a local run (no FROM=) learns its rank count only from the jobs it ran;
    before the swap it is refused against a folder measured with another shape, and the new run
    is kept under scratch/refused/ instead of being lost."""
    from mfulab import results
    from mfulab.run import runner

    final = tmp_path / "results" / "cpu-2c" / "overlap"
    final.mkdir(parents=True)
    results.write_json(final / results.ENV, {"measured_env": _env(1, 8)})
    new = tmp_path / "results" / "cpu-2c" / ".tmp-overlap"
    new.mkdir()
    results.write_json(new / results.ENV, {"jobs": [{"world_size": 2, **_env(1, 2)}]})  # as run() writes it
    with pytest.raises(ParameterError, match="2 ranks over 1 node.*kept in"):
        runner._refuse_other_shape_keeping(final, new, tmp_path / "scratch")
    (kept,) = (tmp_path / "scratch" / "refused").iterdir()
    assert (kept / results.ENV).exists()
    assert results.read_json(final / results.ENV) == {"measured_env": _env(1, 8)}
    # the same shape replaces as before
    results.write_json(new / results.ENV, _env(1, 8))
    runner._refuse_other_shape_keeping(final, new, tmp_path / "scratch")


def test_rank_info_without_pci_attributes_in_older_torch(monkeypatch):
    import types

    import torch

    props = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=80e9)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    info = jobinfo.rank_info("cuda")
    assert info["device"] == "cuda:0" and info["pci_bus_id"] is None


def test_every_nodes_first_rank_records_its_nodes_gpus(monkeypatch):
    """env.json's nvidia-smi report came from the writing rank's node only: a second node's
    driver, clocks and ECC went unrecorded."""
    import torch.distributed as dist

    monkeypatch.setattr(dist, "get_rank", lambda: 8)
    monkeypatch.setattr(dist, "get_world_size", lambda: 1)
    monkeypatch.setattr(dist, "all_gather_object", lambda out, obj: out.__setitem__(0, obj))
    monkeypatch.setattr(jobinfo, "rank_info", lambda device: {"rank": 8, "local_rank": 0, "host": "node2"})
    monkeypatch.setattr(jobinfo, "nvidia_report", lambda: {"gpus": [{"index": "0"}], "topology": "GPU0"})
    (info,) = jobinfo.gather_ranks("cuda")
    assert info["nvidia"]["gpus"] == [{"index": "0"}]
    (info,) = jobinfo.gather_ranks("cpu")
    assert "nvidia" not in info
