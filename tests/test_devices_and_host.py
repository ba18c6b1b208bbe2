import os

import pytest
import torch

from mfulab.analytic import devices
from mfulab.errors import ParameterError
from mfulab.measure import host

# Names as the frameworks report them (torch.cuda.get_device_name(), torch_npu's and
# habana_frameworks' get_device_name()), each with the one entry it must resolve to.
REPORTED_NAMES = {
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "NVIDIA H100 PCIe": "h100-pcie",
    "NVIDIA H100 NVL": "h100-nvl",
    "NVIDIA H200": "h200",
    "NVIDIA H200 NVL": "h200-nvl",
    "NVIDIA GH200 480GB": "gh200-96gb",
    "NVIDIA GH200 144G HBM3e": "gh200-144gb",
    "NVIDIA H800": "h800",
    "NVIDIA H20": "h20",
    "NVIDIA B200": "b200",
    "NVIDIA GB200": "gb200",
    "NVIDIA A100-SXM4-80GB": "a100",
    "NVIDIA A100-SXM4-40GB": "a100-sxm-40gb",
    "NVIDIA A100-PCIE-40GB": "a100-pcie-40gb",
    "NVIDIA A100 80GB PCIe": "a100-pcie-80gb",
    "NVIDIA A800-SXM4-80GB": "a800-sxm-80gb",
    "NVIDIA A800-SXM4-40GB": "a800-sxm-40gb",
    "NVIDIA A800 80GB PCIe": "a800-pcie-80gb",
    "NVIDIA L40S": "l40s",
    "NVIDIA L4": "l4",
    "NVIDIA GeForce RTX 4090": "rtx-4090",
    "Tesla V100-SXM2-16GB": "v100-sxm2-16gb",
    "Tesla V100-SXM2-32GB": "v100-sxm2-32gb",
    "Tesla V100-PCIE-16GB": "v100-pcie-16gb",
    "Tesla V100-PCIE-32GB": "v100-pcie-32gb",
    "Tesla V100S-PCIE-32GB": "v100s-pcie-32gb",
    "AMD Instinct MI300X": "mi300x",
    "AMD Instinct MI325X": "mi325x",
    "AMD Instinct MI250X": "mi250x-gcd",
    "AMD Instinct MI250": "mi250-gcd",
    "GAUDI2": "gaudi2",
    "GAUDI3": "gaudi3",
    "Ascend910B1": "ascend-910b1",
    "Ascend910B2": "ascend-910b2",
    "Ascend910B3": "ascend-910b3",
    "Ascend910B4": "ascend-910b4",
}


@pytest.mark.parametrize("name,key", sorted(REPORTED_NAMES.items()))
def test_reported_names_map_to_exactly_their_entry(name, key):
    assert len(REPORTED_NAMES) >= 25
    assert devices.device_spec(name).key == key
    assert devices.device_spec(f"  {name.upper()} ").key == key  # case and outer spaces do not matter


def test_keys_used_by_the_studies_keep_their_figures():
    # fusion (B4_DATASHEET_DEVICE, A7 sensitivity), mfu's datasheet denominator
    a100 = devices.device_spec("a100")
    assert (a100.flops_per_s["bf16"], a100.flops_per_s["tf32"], a100.flops_per_s["fp32"]) == (
        312e12,
        156e12,
        19.5e12,
    )
    assert a100.mem_bytes_per_s == 2039e9
    h100 = devices.device_spec("h100-sxm")
    assert h100.flops_per_s["bf16"] == pytest.approx(989.4e12) and h100.mem_bytes_per_s == 3350e9
    ascend = devices.device_spec("ascend-910b")
    assert ascend.flops_per_s["bf16"] == 320e12 and ascend.mem_bytes_per_s == 1600e9
    assert devices.peak_flops_per_s("NVIDIA H100 PCIe", "bf16") == 756e12
    assert devices.peak_flops_per_s("NVIDIA H200", "tf32") == pytest.approx(494.7e12)
    assert devices.peak_flops_per_s("AMD Instinct MI300X", "bf16") == pytest.approx(1307.4e12)


def test_products_that_used_to_be_guessed_get_their_own_figures():
    # NVL cards are not SXM: lower clocks, lower dense peak
    assert devices.peak_flops_per_s("NVIDIA H100 NVL") < devices.peak_flops_per_s("NVIDIA H100 80GB HBM3")
    assert devices.peak_flops_per_s("NVIDIA H200 NVL") < devices.peak_flops_per_s("NVIDIA H200")
    # a GH200's results must not land in an H200's folder, nor a GB200's in a B200's
    assert devices.device_spec("NVIDIA GH200 480GB").key != devices.device_spec("NVIDIA H200").key
    assert devices.device_spec("NVIDIA GB200").key != devices.device_spec("NVIDIA B200").key
    # the 40 GB A100s have HBM2 at 1.555 TB/s, not the 80 GB SXM's 2.039 TB/s
    for name in ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"):
        assert devices.device_spec(name).mem_bytes_per_s == 1555e9
    # one torch device of an MI250X is one GCD: half the package
    assert devices.peak_flops_per_s("AMD Instinct MI250X") == pytest.approx(383e12 / 2)


def test_every_entry_has_sources_units_and_no_sparsity():
    for spec in devices.DEVICES:
        assert spec.source.startswith("https://"), spec.key
        assert spec.flops_per_s and all(v > 0 for v in spec.flops_per_s.values()), spec.key
        assert set(spec.flops_per_s) <= {"bf16", "fp16", "tf32", "fp32", "fp8", "fp6", "fp4"}, spec.key
        # each lower precision at least as fast as the one above it (a sparse figure among dense
        # ones, or dense among sparse, would break the ladder)
        ladder = [spec.flops_per_s[d] for d in ("bf16", "fp8", "fp4") if d in spec.flops_per_s]
        assert ladder == sorted(ladder), spec.key
        assert spec.memory_bytes is not None and spec.memory_bytes >= 16 * 2**30, spec.key
        # dense tf32 is about half of dense bf16 wherever both exist (one sparse figure would break it;
        # 0.51: the L40S datasheet rounds tf32 to 183 against bf16's 362.05)
        if {"tf32", "bf16"} <= set(spec.flops_per_s):
            assert spec.flops_per_s["tf32"] / spec.flops_per_s["bf16"] <= 0.51, spec.key
        if spec.approximate:
            assert "approximate" in spec.note, spec.key
    for key in ("h800", "h20", "ascend-910b", "ascend-910b2"):
        assert devices.device_spec(key).approximate
    assert not devices.device_spec("h100-sxm").approximate


@pytest.mark.parametrize(
    "name,candidates",
    [
        ("AMD Instinct MI250X / MI250", "mi250x-gcd, mi250-gcd"),
        ("NVIDIA GH200", "gh200-96gb, gh200-144gb"),
        ("H100", "h100-sxm, h100-pcie, h100-nvl"),
        ("Ascend910B", "ascend-910b1"),
    ],
)
def test_ambiguous_names_are_refused(name, candidates):
    with pytest.raises(ParameterError, match="more than one product") as err:
        devices.device_spec(name)
    assert candidates in str(err.value) and "known devices" in str(err.value).lower()


@pytest.mark.parametrize(
    "name", ["Tesla K80", "NVIDIA A100-SXM4-80GB MIG 1g.10gb", "NVIDIA H100 80GB HBM3 extra", "h100-sx"]
)
def test_unknown_names_are_refused_not_guessed(name):
    with pytest.raises(ParameterError, match="Known devices: .*h100-sxm") as err:
        devices.peak_flops_per_s(name)
    assert "pass the key" in str(err.value)


def test_missing_dtype_is_refused():
    with pytest.raises(ParameterError, match="no published dense fp32"):
        devices.peak_flops_per_s("ascend-910b", "fp32")
    with pytest.raises(ParameterError, match="no published dense bf16"):
        devices.peak_flops_per_s("Tesla V100-SXM2-32GB", "bf16")


def test_a_table_with_a_duplicate_name_is_refused(tmp_path):
    table = tmp_path / "devices.yaml"
    entry = (
        "{key: %s, names: [nvidia x], tflops: {bf16: 1}, mem_gb_per_s: 1, memory_gib: 1, source: https://x}"
    )
    table.write_text(f"devices:\n  - {entry % 'a'}\n  - {entry % 'b'}\n")
    with pytest.raises(ValueError, match="occurs twice"):
        devices._load_devices(table)
    table.write_text(f"devices:\n  - {entry % 'a'}\nambiguous:\n  nvidia y: [a, c]\n")
    with pytest.raises(ValueError, match="unknown keys"):
        devices._load_devices(table)


def _fake_cuda(monkeypatch, name: str, visible: int):
    monkeypatch.delenv("MACHINE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)


def test_machine_slug_counts_the_jobs_ranks_not_the_visible_gpus(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    _fake_cuda(monkeypatch, "NVIDIA H100 80GB HBM3", visible=8)
    assert host.machine_slug() == "h100-sxm"  # a single-process study on an 8-GPU node
    monkeypatch.setenv("WORLD_SIZE", "16")
    assert host.machine_slug() == "h100-sxm-x16"  # a 2-node torchrun job
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert host.machine_slug() == "h100-sxm"
    monkeypatch.setenv("WORLD_SIZE", "eight")
    with pytest.raises(ParameterError, match="WORLD_SIZE"):
        host.machine_slug()


def test_machine_slug_of_devices_without_an_entry(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    _fake_cuda(monkeypatch, "NVIDIA GH200 480GB", visible=1)
    assert host.machine_slug() == "gh200-96gb"
    _fake_cuda(monkeypatch, "Tesla K80", visible=4)
    assert host.machine_slug() == "tesla-k80"  # unknown: its own name, never another entry's key


def test_machine_slug_override(monkeypatch):
    monkeypatch.setenv("MACHINE", "My Cluster/A100 x8")
    assert host.machine_slug() == "my-cluster-a100-x8"
    monkeypatch.setenv("MACHINE", "///")
    with pytest.raises(ParameterError, match="empty folder name"):
        host.machine_slug()


def test_fingerprint_has_versions():
    fp = host.fingerprint()
    for key in ("machine", "python", "torch", "cpu_model", "cpu_count", "device_name", "device_count"):
        assert key in fp


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_is_refused():
    with pytest.raises(ParameterError, match="CUDA is not available"):
        host.resolve_device("cuda")
    assert host.resolve_device("auto") == "cpu"


def test_results_folder_says_what_ran_on_a_gpu_machine(monkeypatch):
    """On an 8-GPU node, the gloo ranks of a gpu profile file under the host, the NCCL node
    profile under the GPUs times its ranks, a one-GPU study under the GPU."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    _fake_cuda(monkeypatch, "NVIDIA H200", visible=8)
    host_slug = f"cpu-{host.usable_cpus()}c"
    assert host.results_machine({"device": "cpu", "nproc": 2}) == host_slug  # overlap/buckets gpu.yaml
    assert host.results_machine({"device": "cuda", "nproc": 8}) == "h200-x8"  # node.yaml
    assert host.results_machine({"device": "auto", "seq_len": 2048}) == "h200"  # a one-GPU study
    assert host.results_machine({}) == "h200"
    monkeypatch.setenv("MACHINE", "lab-box")
    assert host.results_machine({"device": "cpu", "nproc": 2}) == "lab-box"


def test_a_masked_cpu_model_is_caught_by_the_measured_ceiling():
    """A VM reporting family 17h model 1 (Zen 1, 128-bit pipes) whose matmuls reach 181 GFLOP/s on
    2 cores: at 128 bits that needs 5.7 GHz, above any Zen / Zen+ boost, so 256-bit pipes; a ceiling
    a real Zen 1 can reach keeps 128."""
    from mfulab.analytic import devices

    kw = {"vendor": "AuthenticAMD", "cpu_family": 0x17, "cpu_model": 0x01, "cores": 2}
    width, why = devices.cpu_fma_width_checked(["fma", "avx2"], measured_flops_per_s=181e9, **kw)
    assert width == 256 and "5.7 GHz" in why
    assert devices.cpu_fma_width_checked(["fma", "avx2"], measured_flops_per_s=50e9, **kw) == (128, None)
    assert devices.cpu_fma_width_checked(["fma", "avx2"], measured_flops_per_s=None, **kw) == (128, None)
    zen3 = {**kw, "cpu_family": 0x19}
    assert devices.cpu_fma_width_checked(["fma", "avx2"], measured_flops_per_s=1e15, **zen3) == (256, None)


def test_a_cpus_peak_from_its_isa_by_hand():
    """cores × clock × FMA units × lanes × 2: an AVX2 Zen 3 core at 2.445 GHz does 2 × 8 × 2 = 32
    fp32 FLOPs per cycle; AVX-512 doubles the lanes on Intel, not on Zen 4's 256-bit pipes."""
    from mfulab.analytic import devices

    avx2, avx512 = ["fma", "avx2"], ["fma", "avx2", "avx512f"]
    amd, intel = "AuthenticAMD", "GenuineIntel"
    cases = {  # (flags, vendor, family, model): FMA width
        (tuple(avx2), amd, 0x19, 0x01): 256,  # Zen 3 (this box)
        (tuple(avx512), amd, 0x19, 0x11): 256,  # Zen 4: AVX-512 on 256-bit pipes
        (tuple(avx512), amd, 0x1A, 0x02): 512,  # Zen 5: full-width AVX-512
        (tuple(avx2), amd, 0x17, 0x01): 128,  # Zen 1: 128-bit pipes
        (tuple(avx2), amd, 0x17, 0x31): 256,  # Zen 2
        (tuple(avx512), intel, 6, 0x55): 512,  # Skylake-SP
        (tuple(avx2), intel, 6, 0x9E): 256,  # a client AVX2 core
        ((), intel, 6, 0x1A): 128,  # no FMA
    }
    for (flags, vendor, family, model), width in cases.items():
        got = devices.cpu_fma_width_bits(flags, vendor=vendor, cpu_family=family, cpu_model=model)
        assert got == width, (vendor, hex(family), hex(model))
    peak = devices.cpu_peak_flops_per_s(cores=2, clock_hz=2.445e9, fma_width_bits=256)
    assert peak == pytest.approx(2 * 2.445e9 * 32)
    assert devices.cpu_peak_flops_per_s(cores=1, clock_hz=1e9, fma_width_bits=512, element_bytes=8) == 32e9
    one_unit = devices.cpu_peak_flops_per_s(cores=1, clock_hz=1e9, fma_width_bits=256, fma_units_per_core=1)
    assert one_unit == 16e9
    with pytest.raises(ParameterError):
        devices.cpu_peak_flops_per_s(cores=0, clock_hz=1e9, fma_width_bits=256)


def test_cpu_isa_reads_what_a_peak_needs():
    from mfulab.measure import host

    isa = host.cpu_isa()
    assert set(isa) >= {"matmul_flags", "vendor", "cpu_family", "physical_cores", "reported_clock_hz"}
    assert set(isa["matmul_flags"]) <= set(host.MATMUL_ISA_FLAGS)
    if isa["physical_cores"] is not None:
        assert 1 <= isa["physical_cores"] <= (os.cpu_count() or 1)


def test_an_extrapolated_device_has_readings_and_a_validated_one_none():
    """The 910B (devices.yaml approximate: no vendor datasheet, no published run in chapter 09's
    validation) is priced in readings that can reverse a verdict: its SKUs' peaks with the
    family's links, the GEMM share, a lower HBM and NCCL's latencies scaled."""
    from mfulab.analytic import extrapolated
    from mfulab.analytic.rates import Assumptions

    assert extrapolated.device_readings("a100") == {} and not extrapolated.is_extrapolated("a100")
    r = extrapolated.device_readings("ascend-910b", matmul_share_of_mamf=0.8)
    assert len(r) == 7
    peaks = [v for k, v in r.items() if k.startswith("peak")]
    assert [p["device"] for p in peaks] == ["ascend-910b3", "ascend-910b1"]
    # a SKU entry has no interconnect of its own: the family's HCCS and RoCE carry over
    assert all(p["intra_node_bytes_per_s"] == 196e9 and p["network_bytes_per_s"] == 25e9 for p in peaks)
    assert (
        r["GEMMs at 0.6 of MAMF"]["matmul_share_of_mamf"] == 0.6 and peaks[0]["matmul_share_of_mamf"] == 0.8
    )
    base = Assumptions()
    assert r["HBM 1.2 TB/s"]["memory_efficiency"] == pytest.approx(base.memory_efficiency * 0.75)
    assert r["collective latency × 4"]["alpha_inter_s"] == pytest.approx(4 * base.alpha_inter_s)
    assert r["collective latency × 0.5"]["nccl_base_latency_s"] == pytest.approx(
        0.5 * base.nccl_base_latency_s
    )
