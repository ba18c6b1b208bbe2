import pytest
import torch

from mfulab import hardware
from mfulab.config import ParameterError


def test_dense_peaks_with_sources():
    assert hardware.peak_flops_per_s("a100", "bf16") == 312e12
    assert hardware.peak_flops_per_s("NVIDIA H100 80GB HBM3", "bf16") == pytest.approx(989.4e12)
    assert hardware.peak_flops_per_s("NVIDIA H100 PCIe", "bf16") == 756e12
    assert hardware.peak_flops_per_s("NVIDIA H200", "tf32") == pytest.approx(494.7e12)
    assert hardware.peak_flops_per_s("AMD Instinct MI300X", "bf16") == pytest.approx(1307.4e12)
    for spec in hardware.DEVICES:
        assert spec.source.startswith("https://")
    for key in ("a100", "h100-sxm", "h200", "b200", "mi300x", "ascend-910b"):
        assert key in hardware.known_devices()


def test_unknown_device_is_refused():
    with pytest.raises(ParameterError, match="known devices"):
        hardware.peak_flops_per_s("Tesla K80")
    with pytest.raises(ParameterError, match="no published dense fp32"):
        hardware.peak_flops_per_s("ascend-910b", "fp32")


def test_machine_slug(monkeypatch):
    monkeypatch.setenv("MACHINE", "My Cluster/A100 x8")
    assert hardware.machine_slug() == "my-cluster-a100-x8"
    monkeypatch.delenv("MACHINE")
    slug = hardware.machine_slug()
    assert slug.startswith("cpu-") or not slug.startswith("cpu")


def test_fingerprint_has_versions():
    fp = hardware.fingerprint()
    for key in ("machine", "python", "torch", "cpu_model", "cpu_count", "device_name", "device_count"):
        assert key in fp


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_is_refused():
    with pytest.raises(ParameterError, match="CUDA is not available"):
        hardware.resolve_device("cuda")
    assert hardware.resolve_device("auto") == "cpu"
