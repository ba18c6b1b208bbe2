"""Every gpu/node/cluster profile, checked here without a GPU: validated on a machine that
(patched) has 1 and 4 GPUs, under the launcher and under torchrun, with a clear refusal where
the machine cannot host it — never a crash or a silent wrong run."""

import pytest
import torch
import yaml

from mfulab import paths
from mfulab.errors import ParameterError
from mfulab.studykit.registry import REGISTRY

from conftest import ROOT

GPU_PROFILES = [
    (study_id, name)
    for study_id in sorted(REGISTRY)
    for name in paths.profiles(study_id)
    if name in ("gpu", "node", "cluster")
]


def _gpus(monkeypatch, count: int):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")


def _params(study_id, name):
    values = yaml.safe_load((ROOT / "studies" / study_id / f"{name}.yaml").read_text()) or {}
    return REGISTRY[study_id].params.from_dict(values)


def test_there_are_gpu_profiles_to_check():
    assert {"gpu", "node"} <= {name for _, name in GPU_PROFILES}


@pytest.mark.parametrize("study_id,name", GPU_PROFILES)
@pytest.mark.parametrize("gpus", [1, 4])
def test_gpu_profile_validates_or_is_refused_clearly(study_id, name, gpus, monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    _gpus(monkeypatch, gpus)
    p = _params(study_id, name)
    nproc = getattr(p, "nproc", 1)
    if getattr(p, "device", "auto") == "cuda" and nproc > gpus:
        with pytest.raises(ParameterError, match=f"needs {nproc} GPUs"):
            p.prepared()
    else:
        p.prepared()


@pytest.mark.parametrize("study_id,name", [(s, n) for s, n in GPU_PROFILES if n in ("node", "cluster")])
def test_multi_gpu_profiles_run_under_torchrun_on_a_4_gpu_node(study_id, name, monkeypatch):
    """Under torchrun the ranks are torchrun's: an 8-rank profile on 2 nodes × 4 GPUs is fine."""
    _gpus(monkeypatch, 4)
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    _params(study_id, name).prepared()


def test_fusion_model_compile_step_runs_in_the_profiles_dtype():
    """fusion/gpu.yaml says bf16: the model-level step's matmuls run in bf16 (autocast), not
    fp32 under a bf16 label; fp32 stays fp32."""
    from mfulab.analytic.config import TransformerConfig
    from mfulab.measure.train import forward_backward
    from mfulab.studies.fusion.compile_bench import _model

    cfg = TransformerConfig(n_layers=1, d_model=16, n_heads=2, vocab_size=32, seq_len=8)
    idx = torch.randint(0, 32, (2, 8))
    for dtype, expected in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        model = _model(cfg, "cpu", graph_break=False, calls=[0])
        seen = []
        model.blocks[0].mlp.register_forward_hook(lambda m, a, out, seen=seen: seen.append(out.dtype))
        forward_backward(model, idx, dtype=dtype)()
        assert seen == [expected]
        assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())


GPU_OPTIONS = ("dtype", "attn_impl", "modes")  # what a gpu profile chooses besides sizes and device
# Paths that do not depend on the gpu options and that the study's smoke test already runs: left
# out here so that the suite does not pay for them twice (fusion: two more cold compiles).
NOT_AGAIN = {"fusion": {"compile_graph_break": False, "compile_cold_process": False}}


@pytest.mark.parametrize(
    "study_id",
    [
        s
        for s, n in GPU_PROFILES
        if n == "gpu"
        and set(yaml.safe_load((ROOT / "studies" / s / "gpu.yaml").read_text()) or {}) & set(GPU_OPTIONS)
    ],
)
def test_gpu_profile_options_run_on_cpu_at_smoke_sizes(study_id, tmp_path, monkeypatch):
    """The options a gpu profile sets (bf16, SDPA, compute modes) run end to end here, on the
    CPU at the smoke profile's sizes, and the analysis reads their records: a gpu run does not
    meet these code paths for the first time."""
    monkeypatch.setenv("MFULAB_RESULTS_ROOT", str(tmp_path))
    gpu = yaml.safe_load((ROOT / "studies" / study_id / "gpu.yaml").read_text())
    smoke = yaml.safe_load((ROOT / "studies" / study_id / "smoke.yaml").read_text())
    options = {k: v for k, v in gpu.items() if k in GPU_OPTIONS}
    study = REGISTRY[study_id]
    values = {**smoke, **options, **NOT_AGAIN.get(study_id, {}), "device": "cpu"}
    p = study.params.from_dict(values).prepared()
    records = study.measure_fn()(p)
    claims = study.outcome_fn()(records, p).claims
    assert claims or not study.claims  # a study that declares claims decides them
    assert all(getattr(p, k) == (tuple(v) if isinstance(v, list) else v) for k, v in options.items())
    if study_id == "recompute":  # every measured row says the precision it ran in
        assert {r["dtype"] for r in records["peak"] + records["timing"]} == {f"{p.dtype} autocast"}
