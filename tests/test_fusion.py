"""Fusion study: bytes model and roofline by hand, correctness gates, saved-bytes scaling."""

import pandas as pd
import pytest
import torch

from mfulab.errors import ParameterError
from mfulab.measure.gpt import naive_causal_attention
from mfulab.studies.fusion import (
    analysis,
    bytes_model,
    claims,
    kernels,
    layer_measured,
    layer_share,
    norm_fusion,
    norm_fusion_bench,
    sdpa_rules,
)
from mfulab.studies.fusion.params import Params


def test_bytes_moved_by_hand():
    n, e = 1000 * 64, 2
    ln_bytes = bytes_model.ln_residual_dropout_bytes
    assert ln_bytes(tokens=1000, hidden=64, dtype_bytes=2, fused=False, dropout=True) == 7 * n * e + n
    assert ln_bytes(tokens=1000, hidden=64, dtype_bytes=2, fused=True, dropout=True) == 4 * n * e + n
    assert ln_bytes(tokens=1000, hidden=64, dtype_bytes=4, fused=False, dropout=False) == 5 * n * 4
    assert bytes_model.predicted_fusion_speedup(dtype_bytes=2, dropout=True) == pytest.approx(15 / 9)
    assert bytes_model.predicted_fusion_speedup(dtype_bytes=4, dropout=False) == pytest.approx(5 / 4)
    with pytest.raises(ParameterError):
        ln_bytes(tokens=0, hidden=64, dtype_bytes=2, fused=True, dropout=True)


def test_write_allocate_roof_by_hand():
    """A copy moves 3 passes through DRAM for the 2 the calibration counts (STREAM's convention)."""
    assert bytes_model.dram_traffic_passes(reads=1, writes=1) == 3
    assert bytes_model.dram_traffic_passes(reads=1, writes=1, write_allocate=False) == 2
    assert bytes_model.copy_roof_factor(reads=1, writes=1) == pytest.approx(1.0)
    assert bytes_model.copy_roof_factor(reads=1, writes=0) == pytest.approx(1.5)
    assert bytes_model.copy_roof_factor(reads=3, writes=2) == pytest.approx(15 / 14)


def test_roofline_by_hand():
    # 1e9 FLOPs and 1e9 bytes on 1e12 FLOP/s and 1e11 B/s: memory-bound, 10 ms
    roofline = bytes_model.roofline_time_s
    assert roofline(flops=1e9, bytes_moved=1e9, peak_flops_per_s=1e12, bandwidth_bytes_per_s=1e11) == 1e-2
    assert roofline(flops=1e12, bytes_moved=1e9, peak_flops_per_s=1e12, bandwidth_bytes_per_s=1e11) == 1.0
    assert analysis.loglog_slope([1, 2, 4, 8], [3, 12, 48, 192]) == pytest.approx(2.0)


def test_eager_and_compiled_agree_at_p0():
    x, a = torch.randn(32, 16), torch.randn(32, 16)
    w, b = torch.randn(16), torch.randn(16)
    h, y = kernels.ln_eager(x, a, w, b, 0.0)
    torch.testing.assert_close(h, x + a)
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(x + a, (16,), w, b))
    hc, yc = torch.compile(kernels.ln_eager)(x, a, w, b, 0.0)
    torch.testing.assert_close(hc, h)
    torch.testing.assert_close(yc, y, atol=1e-5, rtol=1e-5)


def test_attention_variants_agree_and_backend_is_recorded():
    q, k, v = [torch.randn(1, 2, 16, 8, requires_grad=True) for _ in range(3)]
    torch.testing.assert_close(
        naive_causal_attention(q, k, v), kernels.sdpa_causal_attention(q, k, v), atol=1e-5, rtol=1e-5
    )
    assert "attention" in kernels.sdpa_backend(q, k, v)


def test_triton_is_skipped_with_a_reason_on_cpu():
    ok, why = kernels.triton_status("cpu")
    assert not ok and "CUDA" in why


def test_naive_attention_memory_prediction():
    # scores, probabilities and both gradients: 4 · e · b · a · s²
    predicted = bytes_model.naive_attention_bytes(batch=2, heads=4, seq_len=128, dtype_bytes=4)
    assert predicted == 4 * 4 * 2 * 4 * 128**2


def test_a8_article_scale():
    a8 = analysis.a8_article_scale()
    # Table 2: s·b·h·34 with flash (+ its fp32 log-sum-exp, 4·a/h) vs s·b·h·(34 + 5as/h); 7B:
    # a=32, s=4096, h=4096; Llama-2-7B's SwiGLU MLP keeps gate, up and their product,
    # 3·11008/4096 per s·b·h for GeLU's 8: 34.125
    per_sbh = 34 - 2 * 8 + 2 * 3 * 11008 / 4096
    lse = 4 * 32 / 4096
    assert a8["activation_reduction"] == pytest.approx(1 - (per_sbh + lse) / (per_sbh + 5 * 32))


@pytest.mark.parametrize(
    "name,value,match",
    [
        ("attn_seq_lens", [0], "attn_seq_lens"),
        ("dropout_p", 1.5, "dropout_p"),
        ("dropout_p", 0.0, "dropout_p"),
        ("layer_heads", 3, "divisor"),
        ("ln_rounds", 1, "at least 2"),
        ("ln_tokens", -1, "ln_tokens"),
        ("compile_attention_seq_lens", [7], "subset"),
        ("compile_preset", "nope", "cpu-small"),
        ("dtype", "fp16", "fp16"),
    ],
)
def test_validate(name, value, match):
    import yaml

    from conftest import ROOT

    params = yaml.safe_load((ROOT / "studies" / "fusion" / "smoke.yaml").read_text())
    params[name] = value
    with pytest.raises(ParameterError, match=match) as err:
        Params.from_dict(params).prepared()  # fp16 on CPU is refused by prepare(), the rest on construction
    assert name in str(err.value)


def test_defaults_are_the_cpu_profile_and_profiles_validate():
    import yaml

    from conftest import ROOT

    assert Params().to_dict()["attn_seq_lens"] == [256, 512, 1024, 2048]
    assert Params().ln_tokens == 0  # the cpu profile sizes the sub-block from the last-level cache
    for path in (ROOT / "studies" / "fusion").glob("*.yaml"):
        Params.from_dict(yaml.safe_load(path.read_text()) or {})


def test_smoke_notebook(run_cli, tmp_path):
    import json

    proc = run_cli("run", "fusion", "--profile", "smoke", "--results-root", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "testbox" / "fusion"
    metrics = json.loads((out / "metrics.json").read_text())
    assert {c["id"] for c in metrics["claims"]} == {"A7", "A8", "B3", "B4", "B5"}
    assert metrics["triton_skipped"]  # CPU: skipped with its reason
    assert metrics["attention_skipped"]  # the smoke profile's memory limit skips naive at the longest length
    figures = {p.name for p in (out / "figures").iterdir()}
    assert {"roofline.png", "ln_fusion.png", "attention.png"} <= figures
    # B5: the graph-break model really breaks (one per block of the 2-block tiny model) and
    # compiles in pieces, instead of reusing the default model's single graph
    compile_rows = {r["variant"]: r for r in metrics["compile"]}
    broken, default = compile_rows["compiled, graph break per block"], compile_rows["compiled (default)"]
    assert broken["breaks_taken_per_step"] == 2
    assert broken["graphs_compiled"] > default["graphs_compiled"] == 1
    assert default["cache"] in {"warm", "cold", "partly warm"}
    assert (out / "tables" / "a8_article_sensitivity.csv").exists()
    # the roofs timed in the sub-block's rounds carry their figures, not the tensors they checked
    # (a first version wrote the copy's 128 MiB tensors into measurements.json as lists: 6.4 GB)
    roofs = json.loads((out / "measurements.json").read_text())["ln"]["roofs"]
    assert set(roofs) == {"roof: copy", "roof: layer matmul"}
    assert all("check" not in r and r["median_s"] > 0 for r in roofs.values())
    assert (out / "measurements.json").stat().st_size < 20e6


def test_cache_state():
    from mfulab.studies.fusion.compile_bench import cache_state

    assert cache_state(hits=2, misses=0) == "warm"
    assert cache_state(hits=0, misses=2) == "cold"
    assert cache_state(hits=1, misses=1) == "partly warm"


def test_roofline_uses_the_counted_passes():
    records = _fake_ln_records(0.1, 0.01, 0.005)
    ln = records["ln"]
    ln["dtype_bytes"], ln["last_level_cache_bytes"] = 4, 2**20
    nests = [[2, 1], [1, 0], [0, 0], [1, 0], [1, 1]]  # inductor's CPU kernel: 5 reads + 2 writes
    ln["generated"] = {q: {"tensor_passes": 7, "per_nest": nests} for q in ("p=0", "p=0.1")}
    for r in ln["rows"]:
        r["min_bytes"] = bytes_model.ln_residual_dropout_bytes(
            tokens=r["tokens"],
            hidden=64,
            dtype_bytes=4,
            fused=r["impl"] != "eager",
            dropout=r["dropout_p"] > 0,
        )
        r["achieved_bytes_per_s"] = r["min_bytes"] / r["median_s"]
    records["bandwidth"] = {"plateau_bytes_per_s": 1e10}
    records["ceiling"] = {
        "dtype": "fp32",
        "rows": [{"size": 64, "flops": 2 * 64**3, "achieved_flops_per_s": 1e11}],
    }
    pts = analysis.roofline_points(records).set_index("kernel")
    compiled = pts.loc["LN+residual (compiled, dram)"]
    # 9 FLOPs per element over 7 passes of 4 bytes (counted) vs 4 passes (the bytes model)
    assert compiled.intensity_flops_per_byte == pytest.approx(9 / 28)
    assert compiled.intensity_bytes_model == pytest.approx(9 / 16)
    eager = pts.loc["LN+residual+dropout (eager, layer)"]  # ATen: 11 passes; bytes model 7e + 1
    assert eager.intensity_flops_per_byte == pytest.approx(11 / 44)
    assert eager.intensity_bytes_model == pytest.approx(11 / 29)
    # write-allocate: the roof, in counted bytes, is (R + W)/(R + 2W) × 3/2 of the copy bandwidth
    assert compiled.dram_roof_vs_copy == pytest.approx(7 / 9 * 1.5)
    assert pts.loc["LN+residual (eager, dram)"].dram_roof_vs_copy == pytest.approx(5 / 7 * 1.5)
    table = norm_fusion.ln_table(records).set_index(["shape", "impl", "dropout_p"])
    row = table.loc[("dram", "compiled", 0.0)]
    assert row.reads_writes == "5 + 2"
    assert row.fraction_of_dram_roof == pytest.approx(row.fraction_of_bandwidth_by_passes / (7 / 9 * 1.5))
    # the DRAM run (8192 × 64 × 4 B × 4 tensors = 8 MiB = 8× the cache) is DRAM-served
    assert not compiled.cache_resident and pts.loc["LN+residual (eager, layer)"].cache_resident


def test_a8_sensitivity_by_hand():
    from mfulab.studies.fusion import attention_memory

    df = attention_memory.sensitivity().set_index("reading")
    central = df.iloc[0]
    # Table 2's 34 and 194 per s·b·h, plus d: Llama-2-7B's SwiGLU MLP keeps gate, up and their
    # product (3·11008/4096 per s·b·h at 2 bytes) where a 4h GeLU keeps 8: d = 0.125, split by TP
    d = 2 * (3 * 11008 / 4096) - 16
    lse = 4 * 32 / 4096  # the fused kernel's fp32 log-sum-exp per row and head: 4·a/h per s·b·h
    assert central.reduction == pytest.approx((160 - lse) / (194 + d))  # 34 vs 34 + 5·a·s/h, a·s/h = 32
    assert df.loc["TP 8 with sequence parallelism"].reduction == pytest.approx(central.reduction)
    # no attention dropout, hidden dropout kept: 34 + 2·a·s/h = 98 vs 34 per s·b·h
    assert df.loc["attention dropout off, hidden dropout on"].reduction == pytest.approx(
        (64 - lse) / (98 + d)
    )
    # no dropout at all: the two 1-byte hidden masks go too, 32 + 64 vs 32
    assert df.loc["all dropout off (GPT layer, Table 2)"].reduction == pytest.approx((64 - lse) / (96 + d))
    # TP 8 without SP: s·b·h·(10 + 24/8) + a·s²·b·2/8 with hidden dropout → 8 of 21 per s·b·h;
    # with no dropout at all the sequence-parallel part is 8, not 10: 8 of 19
    tp8 = "TP 8, no sequence parallelism, "
    assert df.loc[tp8 + "attention dropout off"].reduction == pytest.approx((8 - lse / 8) / (21 + d / 8))
    assert df.loc[tp8 + "all dropout off (GPT layer, Table 2)"].reduction == pytest.approx(
        (8 - lse / 8) / (19 + d / 8)
    )
    # micro-batch 1 with 16 B/param of model states on one device: 32 layers × 194 vs 34 B per s·b·h
    row = df.loc["model states counted (one device), micro-batch 1"]
    acts_gb = 32 * 4096 * 4096 * 194 / 1e9  # Table 2 counts bytes (bf16 included)
    assert row.naive_GB_per_device - row.fused_GB_per_device == pytest.approx(
        32 * 4096 * 4096 * (160 - lse) / 1e9
    )
    assert row.naive_GB_per_device > acts_gb
    assert (df.vs_stated == df.reduction - 0.40).all()
    assert "−40%" in attention_memory.sensitivity_sentence()
    # the reading below the stated cut is named, not hidden behind "every reading ≥ −40%"
    # a baseline that recomputes the attention core keeps no a·s² terms: nothing left to cut
    assert df.loc["selective recompute in both"].reduction == pytest.approx(0.0, abs=1e-12)
    assert df.loc["selective recompute in both, TP 8, no sequence parallelism"].reduction == 0
    # only layouts that hold one sequence on the card vote, each within 5 points of 40% or not
    assert not df.loc["central: Table 2 as printed, activations only"].one_sequence_fits_card
    assert df.loc["TP 8, no sequence parallelism"].one_sequence_fits_card
    sentence = attention_memory.sensitivity_sentence()
    near = sentence.split("of the stated −40% under ")[1].split(";")[0]
    assert "attention dropout off" in near and "all dropout off" in near and "(−61%)" not in near
    assert "cannot hold one sequence (TP 1 and TP 2" in sentence
    # the claim's quantity is activation memory: the model-state readings are context, never voted
    assert "model states" not in near and "another quantity, context only" in sentence
    answers = attention_memory.memory_answers(df.reset_index())
    assert answers.count(True) == 2 and answers.count(False) == 4
    assert df.loc["attention dropout off, hidden dropout on"].dropout_off
    assert not df.loc["TP 8, no sequence parallelism"].dropout_off


def test_sdpa_saved_bytes_by_hand():
    """SDPA's CPU flash kernel keeps its output and a per-row log-sum-exp besides its inputs."""
    from mfulab.measure.memprobe import SavedTensorAccountant

    b, a, s, d = 1, 2, 32, 8
    qkv = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(b, a, s, d)) for _ in range(3)])
    with SavedTensorAccountant(qkv) as acc:
        out = kernels.sdpa_causal_attention(*qkv)
    assert sum(r["bytes"] for r in acc.unique()) == 4 * b * a * s * d + 4 * b * a * s
    with SavedTensorAccountant(qkv) as acc:
        out = naive_causal_attention(*qkv)
    saved = sum(r["bytes"] for r in acc.unique())
    # softmax output (a·s² fp32) + causal mask (s² bool); q, k, v are inputs
    assert saved == 4 * b * a * s * s + s * s
    del out


# ---------------------------------------------------------------- A7: passes, kernels, Amdahl

# two loop nests as inductor's C++ writes them: one tensor load + one tensor store; one tensor
# load (the weights' x1 and the per-row store span fewer than numel = 64 elements)
NESTS = (
    """for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(64L); x0+=16)
{
    auto tmp0 = at::vec::Vectorized<float>::loadu(in_ptr0 + static_cast<int64_t>(x0), 16);
    tmp0.store(out_ptr0 + static_cast<int64_t>(x0));
}
""",
    """for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(4L); x0+=1)
{
    for(int64_t x1=static_cast<int64_t>(0L); x1<static_cast<int64_t>(16L); x1+=16)
    {
        auto tmp0 = at::vec::Vectorized<float>::loadu(out_ptr0 + static_cast<int64_t>(x1 + 16L*x0), 16);
        auto tmp1 = at::vec::Vectorized<float>::loadu(in_ptr2 + static_cast<int64_t>(x1), 16);
        out_ptr1[static_cast<int64_t>(x0)] = 0;
    }
}
""",
)
# with OpenMP (more than one thread): each nest after a `#pragma omp for`
SYNTHETIC_KERNEL = "\n#pragma omp parallel\n{\n" + "".join(f"#pragma omp for\n{n}" for n in NESTS) + "}\n"
# single-threaded: no OpenMP, each nest a top-level block of the kernel's body
SINGLE_THREADED_KERNEL = (
    'extern "C" void kernel(const float* in_ptr0, const float* in_ptr2, float* out_ptr0, float* out_ptr1)\n'
    "{\n    std::atomic<int> inductor_cpu_integer_div_error{0};\n"
    + "".join(f"    {{\n    #pragma GCC ivdep\n{n}    }}\n" for n in NESTS)
    + "}\n"
)


def test_inductor_passes_by_hand():
    # nest 1: one tensor load + one tensor store; nest 2: one tensor load (weights and per-row
    # stores span fewer than numel = 64 elements)
    passes = kernels.inductor_tensor_passes(SYNTHETIC_KERNEL, 64)
    assert passes == {
        "loop_nests": 2,
        "tensor_loop_nests": 2,
        "tensor_passes": 3,
        "per_nest": [[1, 1], [1, 0]],
    }
    assert kernels.inductor_tensor_passes("def triton_kernel(): pass", 64) is None


def test_inductor_passes_of_a_single_threaded_kernel():
    # with one thread inductor emits no OpenMP: the same two nests as SYNTHETIC_KERNEL's, as
    # top-level blocks of the kernel's body (a run on one core failed on a source it did not read)
    passes = kernels.inductor_tensor_passes(SINGLE_THREADED_KERNEL, 64)
    assert passes["per_nest"] == [[1, 1], [1, 0]] and passes["loop_nests"] == 2


def test_compiled_ln_passes_and_eager_kernels():
    from torch._inductor.utils import run_and_get_code

    x, a, w, b = torch.randn(64, 32), torch.randn(64, 32), torch.randn(32), torch.randn(32)
    _, codes = run_and_get_code(torch.compile(kernels.ln_eager, dynamic=False), x, a, w, b, 0.0)
    passes = kernels.inductor_tensor_passes(codes[-1], 64 * 32)
    # at least the 4 passes of one fused loop (read x, a; write h, y)
    assert passes["tensor_passes"] >= 4 and passes["tensor_loop_nests"] >= 1
    p0 = kernels.ln_kernel_count(lambda: kernels.ln_eager(x, a, w, b, 0.0), "cpu", 64 * 32)
    assert p0["names"] == ["aten::add", "aten::native_layer_norm"]  # dropout at p = 0 is not called
    pd = kernels.ln_kernel_count(lambda: kernels.ln_eager(x, a, w, b, 0.1), "cpu", 64 * 32)
    assert "aten::bernoulli_" in pd["names"] and "aten::dropout" not in pd["names"]
    assert norm_fusion.eager_cpu_passes(False) == 5 and norm_fusion.eager_cpu_passes(True) == 11


def test_ln_shape_from_the_cache():
    p = Params()
    shape = norm_fusion_bench.ln_shape(p, 260 * 2**20, 4, "cuda")  # cuda: no host-memory cap
    assert shape["tokens"] % 64 == 0
    m = p.ln_llc_multiple
    assert shape["working_set_bytes"] >= m * 260 * 2**20 > shape["working_set_bytes"] - 64 * 4 * 4 * 1024
    assert norm_fusion_bench.ln_shape(Params(ln_tokens=512), None, 4, "cpu")["tokens"] == 512
    with pytest.raises(RuntimeError):
        norm_fusion_bench.ln_shape(p, None, 4, "cpu")
    # a VM reporting a 32 MiB L3 while caching far more: sized from the calibration's floor
    floored = norm_fusion_bench.ln_shape(p, 32 * 2**20, 4, "cuda", cache_floor_bytes=64 * 2**20)
    assert floored["cache_bytes"] == 64 * 2**20 and floored["working_set_bytes"] >= m * 64 * 2**20
    assert norm_fusion.cache_bytes(floored) == 64 * 2**20
    assert norm_fusion.cache_bytes({"last_level_cache_bytes": 2**20}) == 2**20  # records before the floor


def test_amdahl_by_hand():
    assert layer_share.amdahl_speedup(0.3, float("inf")) == pytest.approx(1 / 0.7)
    assert layer_share.amdahl_speedup(0.5, 2.0) == pytest.approx(1 / 0.75)
    assert layer_share.required_share(1 / 0.7) == pytest.approx(0.3)
    assert layer_share.layer_forward_flops_per_token(1024, 2048) == 24 * 1024**2 + 4 * 1024 * 2048
    row = layer_share.article_layer(
        preset_name="article-13b",
        device="a100",
        dtype="bf16",
        matmul_efficiency=1.0,
        bandwidth_efficiency=1.0,
    )
    h = 5120
    assert row["sub_block_unfused_bytes_per_token"] == 2 * (7 * h * 2 + h)
    assert row["sub_block_fused_bytes_per_token"] == 2 * (4 * h * 2 + h)
    matmul_s = (24 * h**2 + 4 * h * 4096) / 312e12
    unfused_s = 2 * 15 * h / 2039e9
    assert row["sub_block_share"] == pytest.approx(unfused_s / (matmul_s + unfused_s))
    # a free sub-block reaches 1.43x exactly at the break-even bandwidth efficiency
    kw = dict(preset_name="article-13b", device="a100", dtype="bf16", matmul_efficiency=1.0)
    even = layer_share.break_even_bandwidth_efficiency(1 / 0.7, **kw)
    at_even = layer_share.article_layer(bandwidth_efficiency=even, **kw)
    assert at_even["layer_speedup_ceiling"] == pytest.approx(1 / 0.7)


def _fake_ln_records(
    block_s: float, eager_p_s: float, compiled_p_s: float, eager_0_s: float = 0.001, compiled_0_s=None
):
    """Records of the LN measurement: 6 rounds of the given times (±2%) at the layer's shape,
    and a DRAM run of 8× the elements at the same time per element; the compiled sub-block at
    p = 0 as fast as eager's unless ``compiled_0_s`` is given."""
    compiled_0_s = eager_0_s if compiled_0_s is None else compiled_0_s
    jitter = [1.0, 1.02, 0.98, 1.01, 0.99, 1.0]

    def times(t):
        return [t * j for j in jitter]

    def row(shape, impl, q, t):
        tokens = 8192 if shape == "dram" else 1024
        label = f"{shape}: {impl} p={q:g}"
        return {
            "shape": shape,
            "tokens": tokens,
            "impl": impl,
            "dropout_p": q,
            "label": label,
            "times_s": times(t),
        }

    rows = [
        row("dram", "eager", 0.0, 8 * eager_0_s),
        row("dram", "compiled", 0.0, 8 * compiled_0_s),
        row("layer", "eager", 0.0, eager_0_s),
        row("layer", "compiled", 0.0, compiled_0_s),
        row("layer", "eager", 0.1, eager_p_s),
        row("layer", "compiled", 0.1, compiled_p_s),
    ]
    for r in rows:
        r["median_s"] = r["times_s"][0]
    return {
        "device": "cpu",
        "ln": {
            "tokens": 8192,
            "hidden": 64,
            "dtype": "fp32",
            "dropout_p": 0.1,
            "working_set_bytes": 4 * 8192 * 64 * 4,
            "predicted": {"p=0": 1.25, "p=0.1": 1.7},
            "generated": None,
            "rows": rows,
            "layer": {"batch": 1, "seq_len": 1024, "tokens": 1024, "forward": {"times_s": times(block_s)}},
        },
    }


@pytest.mark.parametrize(
    "block_s,eager_p_s,compiled_p_s,verdict",
    [
        # share ~17%: even a free sub-block gives ≤ 1.2x, so this layer cannot reach the claim's
        # regime (a toy regime cannot refute it)
        (0.100, 0.010, 0.005, "inconclusive on this machine"),
        # the sub-block is most of the layer and its bytes (p = 0) get ~100x faster; both pay eager's
        # dropout random numbers (1 ms), so a cheaper generator alone would not count
        (0.250, 0.100, 0.002, "shown"),
        (
            0.050,
            0.018,
            0.012,
            "inconclusive on this machine",
        ),  # share ~42%: a free one could, this one does not
    ],
)
def test_a7_layer_verdict(block_s, eager_p_s, compiled_p_s, verdict):
    shown = verdict == "shown"
    records = _fake_ln_records(
        block_s,
        eager_p_s,
        compiled_p_s,
        eager_0_s=0.099 if shown else 0.001,
        compiled_0_s=0.001 if shown else None,
    )
    t = {
        "ln_fusion_speedup": pd.DataFrame(norm_fusion.comparisons(records)),
        "ln_layer_share": layer_measured.layer_table(records),
        "a7_article_sensitivity": norm_fusion.article_sensitivity(),
    }
    measured, analytic, three_to_one, ln_twice = claims.a7_claims(
        records, t
    )  # no ln_fusion: no mechanism row
    # "three accesses become one": the sentence counts round trips, true per kernel by construction
    # (shown); the bytes (7 → 4 passes with dropout) are a note, not a second reading
    assert three_to_one.verdict == "shown" and "15 → 9 bytes per element" in three_to_one.evidence
    assert ln_twice.verdict == "not checkable" and "held in L1" in ln_twice.evidence
    assert measured.verdict == verdict
    assert ("cannot reach that regime" in measured.evidence) == (block_s == 0.100)
    # the 13B layer at TP 8 without SP, judged on the fused sub-block the claim describes: below
    # 1.33x ("about 30%": a 25% cut at the least) in every row, the eager kernels down to half the
    # fused kernel's bandwidth (published A100 LayerNorm pairs: the slower at 47-91% of the faster,
    # standing in for the 910B's, none published); with the forward's TP all-reduces in the layer
    # (27% of it) 1.33x would need them at <= 33% at the central case, below every published pair,
    # but the table's bandwidth efficiency 0.2 breaks even inside the published range (74%):
    # analytic only
    assert analytic.verdict == "analytic only" and "bandwidth efficiency 0.2" in analytic.evidence
    assert "1.33× needs the eager kernels at ≤ 33% of the fused kernel's bandwidth" in analytic.evidence
    assert "none for the ascend-910b: the lowest published pair, 47%" in analytic.evidence
    assert "rows whose break-even lies at or above it" in analytic.evidence and "(74%)" in analytic.evidence
    assert "the forward's TP all-reduces 27.4%" in analytic.evidence
    # the bound without them (until 2026-12-07) is reported, not voted
    assert "Without the TP all-reduces" in analytic.evidence and "break-even 43%" in analytic.evidence
    sens = t["a7_article_sensitivity"]
    assert sens.fused_below_claim.all() and sens.eager_ratio.min() == 0.5


def test_a7_article_layer_in_its_own_layout():
    """The article trains its 13B at TP 8 without sequence parallelism: each card runs 1/8 of
    the matmuls and the whole sub-block, so the sub-block's share rises about 8-fold over one
    card (by hand, launches and TP all-reduces aside: 2.6% → 17.7%, ceiling 1/(1 − 0.177) =
    1.215×, break-even bandwidth efficiency 5% → 40%); the same layout's forward all-reduces
    (two of s·h bf16 over HCCS) take part of the layer and lower the share; at 20% of the
    bandwidth a free sub-block passes 1.33×: the claim is possible there, so no refutation."""
    sens = norm_fusion.article_sensitivity()
    central = sens.iloc[0]
    assert (central.tp, central.sequence_parallel) == (8, False)
    kw = dict(preset_name="article-13b", device="ascend-910b", dtype="bf16", matmul_efficiency=0.5)
    bare = dict(**kw, tp=8, launch_s=0.0, tp_comm=False)
    assert layer_share.article_layer(bandwidth_efficiency=0.8, **bare)["sub_block_share"] == pytest.approx(
        0.177, abs=0.001
    )
    assert layer_share.break_even_bandwidth_efficiency(1 / 0.7, **bare) == pytest.approx(0.402, abs=0.002)
    # the forward's two TP all-reduces by hand: a ring of 8 on HCCS (196 GB/s × the link efficiency
    # 0.78, 3.4 µs a step), 14 steps and 2·7/8 of 4096 × 5120 × 2 B each, per token
    call_s = 14 * 3.4e-6 + 1.75 * 4096 * 5120 * 2 / (196e9 * 0.78)
    row = layer_share.article_layer(bandwidth_efficiency=0.8, tp=8, launch_s=0.0, **kw)
    assert row["tp_comm_s_per_token"] == pytest.approx(2 * call_s / 4096, rel=1e-6)
    no_launch = sens[(sens.varied == "launch per kernel") & (sens.launch_s == 0)].iloc[0]
    assert (
        no_launch.sub_block_share == pytest.approx(row["sub_block_share"])
        and no_launch.sub_block_share < 0.177
    )
    assert no_launch.layer_speedup_ceiling == pytest.approx(1 / (1 - no_launch.sub_block_share))
    left_out = sens[sens.varied == layer_share.TP_COMM_LEFT_OUT].iloc[0]
    assert left_out.tp_comm_share == 0 and left_out.sub_block_share > central.sub_block_share
    # the launches, the article's second mechanism, only add to the sub-block's share
    assert central.launch_s == 5e-6 and central.sub_block_share > no_launch.sub_block_share
    assert central.layer_speedup_ceiling == pytest.approx(1 / (1 - central.sub_block_share))
    # the share is its bytes' part plus its launches' part, each reported
    assert central.bytes_share + central.launch_share == pytest.approx(central.sub_block_share)
    assert 0.2 < central.tp_comm_share < 0.35  # the all-reduces: about a quarter of the layer
    assert no_launch.launch_share == 0 and no_launch.bytes_share == pytest.approx(no_launch.sub_block_share)
    one_card = sens[(sens.varied == "layout") & (sens.tp == 1)].iloc[0]
    with_sp = sens[(sens.varied == "layout") & sens.sequence_parallel].iloc[0]
    assert one_card.sub_block_share == pytest.approx(0.0278, abs=0.001)
    # SP splits the bytes (not the launches) and moves the same TP bytes as reduce-scatter + all-gather
    assert with_sp.bytes_share < one_card.bytes_share and with_sp.launch_share > one_card.launch_share
    assert with_sp.tp_comm_share > 0 == one_card.tp_comm_share
    slow = sens[(sens.varied == "bandwidth efficiency") & (sens.bandwidth_efficiency == 0.2)].iloc[0]
    assert slow.layer_speedup_ceiling > 1 / 0.75 and not slow.below_claim
    assert set(sens.varied) == {
        "central",
        "layout",
        "device",
        "matmul efficiency",
        "bandwidth efficiency",
        "launch per kernel",
        "eager ÷ fused bandwidth",
        layer_share.TP_COMM_LEFT_OUT,
    }
    # the layer speed-up at the break-even eager ratio is the claim's threshold: 1.33x, the low end
    # of "about 30%" (a 25% cut)
    at = layer_share.article_layer(
        preset_name="article-13b",
        device="ascend-910b",
        dtype="bf16",
        matmul_efficiency=central.matmul_efficiency,
        bandwidth_efficiency=central.bandwidth_efficiency,
        tp=8,
        launch_s=central.launch_s,
        tokens_per_call=4096,
        eager_ratio=central.break_even_eager_ratio,
    )
    assert at["layer_speedup"] == pytest.approx(1 / 0.75, rel=1e-6)


def test_a7_launch_term_by_hand():
    """Two sub-blocks per layer, 3 launches each unfused and 1 fused, one call per 4096-token
    sequence: 2·3·5 µs / 4096 per token unfused, a third of it fused; a measured launch cost
    adds a row of its own."""
    kw = dict(
        preset_name="article-13b",
        device="ascend-910b",
        dtype="bf16",
        matmul_efficiency=0.5,
        bandwidth_efficiency=0.8,
        tp=8,
        tokens_per_call=4096,
        kernels=(3, 1),
    )
    plain = layer_share.article_layer(**kw)
    row = layer_share.article_layer(**kw, launch_s=5e-6)
    assert row["sub_block_launch_s_per_token"] == pytest.approx(2 * 3 * 5e-6 / 4096)
    assert row["sub_block_s_per_token"] - plain["sub_block_s_per_token"] == pytest.approx(2 * 3 * 5e-6 / 4096)

    def fused_layer_s(r):  # the layer with the fused sub-block: the whole layer over its speed-up
        return (r["matmul_s_per_token"] + r["tp_comm_s_per_token"] + r["sub_block_s_per_token"]) / r[
            "layer_speedup"
        ]

    # the fused layer still pays one launch per sub-block
    assert fused_layer_s(row) - fused_layer_s(plain) == pytest.approx(2 * 1 * 5e-6 / 4096)
    sens = norm_fusion.article_sensitivity(measured_launch_s=2e-6)
    measured = sens[sens.varied.str.contains("eager dispatch")]
    assert len(measured) == 1 and measured.launch_s.iloc[0] == 2e-6


def test_cuda_flash_rules():
    ok = dict(dtype="bf16", head_dim=64, sm=(8, 0))
    assert sdpa_rules.cuda_flash_ineligible(**ok) == []
    assert "fp32" in sdpa_rules.cuda_flash_ineligible(**{**ok, "dtype": "fp32"})[0]
    assert sdpa_rules.cuda_flash_ineligible(**ok, has_attn_mask=True) == ["an explicit attn_mask"]
    assert sdpa_rules.cuda_flash_ineligible(**{**ok, "head_dim": 320})
    assert sdpa_rules.cuda_flash_ineligible(**{**ok, "sm": (7, 5)})
    assert sdpa_rules.cuda_flash_ineligible(**{**ok, "sm": (8, 6), "head_dim": 200})
    assert not sdpa_rules.cuda_flash_ineligible(**{**ok, "sm": (8, 6), "head_dim": 256})
    assert sdpa_rules.cuda_flash_ineligible(**{**ok, "sm": (8, 6), "head_dim": 256}, dropout_p=0.1)
    assert sdpa_rules.cuda_flash_ineligible(**ok, seq_q=10, seq_k=20)


def test_sdpa_dispatch_cases_on_cpu():
    cases = {c["case"]: c["backend"] for c in kernels.sdpa_dispatch_cases(1, 2, 16, 32, "cpu", torch.float32)}
    assert "flash" in cases["causal, no mask (the study's inputs)"]
    assert cases["dropout_p = 0.1"].startswith("math")  # the CPU flash kernel has no dropout


def test_b3_on_cuda_is_decided_at_the_articles_inputs():
    """The article's 7B in bf16 on an A100 (head dim 128, causal, no mask) is flash-eligible by
    PyTorch's rules, so the CUDA row is decided (confirmed, analysis); the same inputs in fp32 are
    not, which is why this run's own fp32 inputs only stand beside it."""
    from mfulab.studies.fusion.stated import B3_ARTICLE_INPUTS

    assert analysis.cuda_flash_reasons_article() == []
    assert sdpa_rules.cuda_flash_ineligible(**{**B3_ARTICLE_INPUTS, "dtype": "fp32"})


def test_b5_published_figure_is_context_in_the_one_row_on_the_sentence():
    """B5's size from torchtitan's Llama 3 8B eager vs compiled (chapter 10's rows by id): 5,762 →
    6,667 and 5,605 → 6,514 tokens/s per GPU, 13.6% and 14.0% shorter steps, both above 8–12%; the
    article's own run is not stated, so the published figure is context in the sentence's one row,
    not a second verdict on it."""
    from mfulab.studies.fusion import published

    text = published.b5_published_context()
    assert "13.6%" in text and "14.0%" in text and "past its top" in text and "context, not a test" in text


def test_b4_is_judged_on_the_stated_two_fold_and_b3_on_its_published_and_documented_rows():
    """TF32 "can double": the A100 datasheet's dense TF32 peak is 8× its FP32 peak (156 against 19.5
    TFLOP/s): it can double, confirmed (the stricter "about 2×" is overshot, a note); a measured 2.1×
    confirms, 1.2× refutes. Article B's baseline already ran 7× over the fp32 peak per GPU,
    so TF32 does not enter B15's step.
    FlashAttention's HBM traffic: 40.3 → 4.4 GB in its paper's Figure 2, 9.2× (several-fold)."""
    import pandas as pd

    from mfulab.studies.fusion import b4_rows
    from mfulab.studies.fusion import published as fusion_published

    sheet = pd.DataFrame({"dtype": ["fp32", "A100 datasheet tf32 / fp32"], "vs_fp32": [1.0, 8.0]})
    (row,) = b4_rows.b4_claims({"matmul_dtypes": sheet})
    # 8×: "can double" (the sentence's 可以翻倍) holds; "about 2×" is overshot, a note
    assert row.verdict == "confirmed" and "can double (≥ 1.6×): yes" in row.evidence
    assert "a note, not a second reading" in row.evidence and "understates the datasheet" in row.evidence
    # a note, not a row (the article credits B15's first step to attention): 8.8e16 FLOPs /
    # (64 GPUs x 10.2 s) = 135 TFLOP/s, 6.9x fp32's 19.5
    assert "135 TFLOP/s per GPU, 6.9×" in row.evidence and "nothing left to speed up" in row.evidence
    measured = pd.DataFrame(
        {"dtype": ["fp32", "tf32", "bf16", "A100 datasheet tf32 / fp32"], "vs_fp32": [1.0, 2.1, 4.0, 8.0]}
    )
    assert b4_rows.b4_claims({"matmul_dtypes": measured})[0].verdict == "confirmed"  # both readings: yes
    slower = measured.assign(vs_fp32=[1.0, 1.2, 4.0, 8.0])
    assert b4_rows.b4_claims({"matmul_dtypes": slower})[0].verdict == "refuted"  # neither reading
    hbm = fusion_published.b3_hbm_claim()
    assert (
        hbm.verdict == "confirmed" and "9.2× fewer" in hbm.evidence and hbm.basis == "published measurement"
    )


def test_a8_step_time_is_priced_by_the_step_model_over_the_readings_that_fit(monkeypatch):
    """Naive against fused attention on 8 of the 910B's cards: the readings that fit (TP 8,
    micro-batch 1 and 2, the article's 16 sequences a step) give 18-19%. But an 18% cut is a
    naive/fused step ratio of 1.22x, inside the step model's error on the ratio of two modelled
    runs: analytic only, whatever the rows say. Were the margin 10%, the stated case would decide
    (at_stated_case): confirmed, reversed only by an assumed input that misses the cut."""
    from mfulab.studies.fusion import attention_memory

    table = attention_memory.step_table()
    fitting = table[table.fits & (table.varied == "reading")]
    assert set(fitting.tp) == {8} and fitting.step_cut.between(0.144, 0.216).all()
    assert (table.global_batch >= 16).all() and (table.global_batch % 16 == 0).all()
    (row,) = attention_memory.a8_step_claim(table)
    assert row.verdict == "analytic only" and "0.6: 25%" in row.evidence and "1.22×" in row.evidence
    monkeypatch.setattr(attention_memory, "A8_STEP_MARGIN", 0.1)
    (row,) = attention_memory.a8_step_claim(table.assign(reproduces=True))
    assert row.verdict == "confirmed (analysis)"
    reversing = table.assign(reproduces=[v == "reading" for v in table.varied])
    assert attention_memory.a8_step_claim(reversing)[0].verdict == "analytic only"
    assert attention_memory.a8_step_claim(table.assign(reproduces=False))[0].verdict == "refuted (analysis)"


def test_a7_at_scale_is_refuted_only_where_a_published_ratio_rules_the_break_even_out(monkeypatch):
    """No published eager/fused figure for the 910B: the lowest published pair of any device (47%)
    stands in. It must lie above every row's break-even, not only the central one's (36%): rows
    that break even at 48-74% leave the row open. Were the lowest published pair above all of
    them, every row below 1.43x would refute it."""
    records = _fake_ln_records(0.100, 0.010, 0.005)
    t = {
        "ln_fusion_speedup": pd.DataFrame(norm_fusion.comparisons(records)),
        "ln_layer_share": layer_measured.layer_table(records),
        "a7_article_sensitivity": norm_fusion.article_sensitivity(),
    }
    assert claims.a7_claims(records, t)[1].verdict == "analytic only"
    monkeypatch.setattr(claims, "A7_EAGER_RATIO_PUBLISHED_LOW", {"a100": 0.80})
    assert claims.a7_claims(records, t)[1].verdict == "refuted (analysis)"


def test_a7_mechanism_is_tested_only_on_a_kernel_with_fewer_passes_than_eager():
    """Inductor's CPU kernel making 7 passes against eager's 5 leaves the mechanism untested
    (inconclusive); a one-pass kernel's interval above 1× shows it, below 1× does not."""
    from mfulab.studies.fusion import a7_rows

    def tables(impl, passes, lo, hi, roof=0.8):
        ln = pd.DataFrame(
            {
                "shape": ["dram", "dram"],
                "dropout_p": [0.0, 0.0],
                "impl": ["eager", impl],
                "passes_over_memory": [5, passes],
                "fraction_of_dram_roof": [0.8, roof],
            }
        )
        speedup = pd.DataFrame(
            [
                {
                    "shape": "dram",
                    "dropout_p": 0.0,
                    "candidate": f"dram: {impl} p=0",
                    "ratio": (lo + hi) / 2,
                    "ratio_lo": lo,
                    "ratio_hi": hi,
                    "predicted_by_passes": 5 / passes,
                    "predicted_by_traffic": 7 / (passes + 2),
                    "run_to_run_drift": 0.3,
                }
            ]
        )
        return {"ln_fusion": ln, "ln_fusion_speedup": speedup}

    cpu = a7_rows.a7_mechanism(tables("compiled", 7, 0.73, 0.91))
    assert cpu.verdict == "inconclusive on this machine" and "not tested" in cpu.evidence
    assert a7_rows.a7_mechanism(tables("triton", 2, 1.6, 1.9)).verdict == "shown"
    assert a7_rows.a7_mechanism(tables("triton", 2, 0.8, 0.95)).verdict == "not shown"
    assert a7_rows.a7_mechanism(tables("triton", 2, 0.9, 1.1)).verdict == "inconclusive on this machine"
    assert a7_rows.a7_mechanism({"ln_fusion_speedup": pd.DataFrame()}) is None
    # with inductor's kernel and the one-pass C kernel both timed, the fewer passes decide
    cpu, one = tables("compiled", 7, 0.73, 0.91), tables("onepass", 4, 1.05, 1.25)
    both = {k: pd.concat([cpu[k], one[k].iloc[-1:]], ignore_index=True) for k in cpu}
    row = a7_rows.a7_mechanism(both)
    assert row.verdict == "shown" and "one-pass C kernel makes 4 passes" in row.evidence
    # a fused kernel far from its DRAM roof (one core cannot pull its bytes) says so beside its time
    slow = a7_rows.a7_mechanism(tables("onepass", 4, 0.79, 0.91, roof=0.41))
    assert slow.verdict == "not shown" and "the fused kernel at 41%" in slow.evidence
    # a widening so wide that no ratio the bytes model allows could clear the line says so up front:
    # one pass of 4 against 5 (streaming stores alone 1.4x) at ±30% needs a point ratio of 1.4 x 1.45/1.1
    t = tables("onepass", 4, 1.1, 1.8)
    t["ln_fusion_speedup"] = t["ln_fusion_speedup"].assign(
        predicted_by_passes=1.25, predicted_by_traffic=1.75
    )
    t["ln_fusion"]["reads_writes"] = ["3+2", "2+2"]
    wide = a7_rows.a7_mechanism(t)
    assert wide.verdict == "inconclusive on this machine"
    assert wide.evidence.startswith("this row cannot be shown on this machine")
    assert not a7_rows.a7_mechanism(tables("triton", 2, 1.6, 1.9)).evidence.startswith("this row cannot")


def test_the_one_pass_kernel_matches_eager_and_drops_its_share():
    from mfulab.studies.fusion import onepass

    if onepass.compiler() is None:
        pytest.skip("no C compiler on this machine")
    fn, why = onepass.build("cpu", "fp32")
    assert why is None, why
    x, a, w, b = torch.randn(96, 256), torch.randn(96, 256), torch.randn(256), torch.randn(256)
    h, y = fn(x, a, w, b, 0.0)
    ref_h, ref_y = kernels.ln_eager(x, a, w, b, 0.0)
    assert torch.equal(h, ref_h) and torch.allclose(y, ref_y, atol=1e-5)
    h, y = fn(x, a, w, b, 0.25)
    dropped = float(((h - x) == 0).float().mean())
    assert abs(dropped - 0.25) < 0.02
    kept = (h - x) != 0
    assert torch.allclose((h - x)[kept], (a / 0.75)[kept], atol=1e-5)  # survivors scaled by 1/(1 − p)
    assert torch.allclose(y, torch.nn.functional.layer_norm(h, (256,), w, b), atol=1e-5)
    h2, _ = fn(x, a, w, b, 0.25)
    assert not torch.equal(h, h2)  # a fresh mask per call
    if fn.streaming_store_bits:  # torch's 64-byte aligned rows of 256 floats: every row streamed
        assert fn.streamed_share == 1.0
        assert not onepass.write_allocate({"ln": {"onepass_streamed_share": 1.0}}, "onepass")
    assert onepass.write_allocate({"ln": {"onepass_streamed_share": 0.5}}, "onepass")
    assert onepass.write_allocate({"ln": {}}, "eager")
    assert onepass.build("cuda", "fp32")[0] is None and onepass.build("cpu", "bf16")[0] is None
    with pytest.raises(ValueError, match="shape"):
        fn(x, a[:, :128].contiguous(), w, b, 0.0)  # the C code would read past a's end
    with pytest.raises(ValueError, match="in \\[0, 1\\)"):
        fn(x, a, w, b, 1.0)
    assert norm_fusion.reads_writes({"ln": {}, "device": "cpu"}, "onepass", 0.1) == (2, 2)


def test_the_controls_compute_the_same_sub_block_with_their_own_passes_and_stores():
    """The C variants (one pass, eager's two, the article's three; ordinary or streaming stores)
    all equal eager at p = 0, drop p of a's entries at p > 0 with the same mask from the same seed
    (only the passes differ), stream exactly where asked, and carry their own pass counts."""
    from mfulab.studies.fusion import onepass

    if onepass.compiler() is None:
        pytest.skip("no C compiler on this machine")
    x, a, w, b = torch.randn(64, 512), torch.randn(64, 512), torch.randn(512), torch.randn(512)
    ref_h, ref_y = kernels.ln_eager(x, a, w, b, 0.0)
    masked = {}
    for impl, (passes, streaming) in onepass.VARIANTS.items():
        torch.manual_seed(3)  # the hash's base: the same mask for every variant
        fn, why = onepass.build("cpu", "fp32", impl=impl)
        assert why is None, why
        h, y = fn(x, a, w, b, 0.0)
        assert torch.equal(h, ref_h) and torch.allclose(y, ref_y, atol=1e-5), impl
        if fn.streaming_store_bits:
            assert fn.streamed_share == 1.0
        assert fn.streamed_share == (1.0 if streaming and fn.streaming_store_bits else 0.0), impl
        torch.manual_seed(3)
        fn = onepass.build("cpu", "fp32", impl=impl)[0]
        h, y = fn(x, a, w, b, 0.3)
        masked[impl] = h
        assert abs(float(((h - x) == 0).float().mean()) - 0.3) < 0.03, impl
        assert torch.allclose(y, torch.nn.functional.layer_norm(h, (512,), w, b), atol=1e-5), impl
        assert onepass.reads_writes(impl) == {1: (2, 2), 2: (3, 2), 3: (4, 3)}[passes]
        assert onepass.kernel_count(impl)["count"] == passes
    assert all(torch.equal(h, masked["onepass"]) for h in masked.values())
    assert set(onepass.DROPOUT_CONTROLS) == {"onepass_plain", "threepass_plain"}
    with pytest.raises(ValueError, match="impl must be one of"):
        onepass.build("cpu", "fp32", impl="fourpass")
    # a streaming variant that streamed all its rows reads no line before a write; ordinary never
    rec = {"ln": {"streamed_share": {"twopass_nt": 1.0, "onepass_plain": 1.0}}}
    assert not onepass.write_allocate(rec, "twopass_nt")
    assert onepass.write_allocate(rec, "onepass_plain") and onepass.write_allocate(rec, "eager")


def _control_records(times: dict, drift: float = 0.08, with_dropout: dict | None = None) -> dict:
    """Control rows in DRAM at p = 0 (``times``) and at p = 0.1 (``with_dropout``)."""
    rows = [
        {"shape": "dram", "dropout_p": q, "impl": impl, "label": f"dram: {impl} p={q:g}", "times_s": list(ts)}
        for q, series in ((0.0, times), (0.1, with_dropout or {}))
        for impl, ts in series.items()
    ]
    shares = {i: 1.0 for i in ("onepass", "twopass_nt")}
    return {
        "ln": {"rows": rows, "streamed_share": shares, "dropout_p": 0.1},
        "params": {"ln_control_ratio_drift": drift},
    }


def test_a7_mechanism_is_decided_by_one_pass_against_the_articles_three_with_dropout():
    """The controls' pairs carry the bytes model's traffic ratios (10/6 with dropout; 7/6, 5/4,
    7/5, 6/4 at p = 0); the row is decided on one pass against three at p with the same stores,
    shown only where that interval lies above 1 and no fusion pair's lies below it; a fused kernel
    that wins over eager only through its streaming stores is not shown."""
    import numpy as np

    from mfulab.studies.fusion import a7_controls

    rng = np.random.default_rng(0)

    def series(ms):
        return ms * 1e-3 * (1 + 0.01 * rng.standard_normal(30))

    real = {"eager": 40, "onepass": 26, "onepass_plain": 41, "twopass_nt": 35, "twopass_plain": 48}
    dropout = {"onepass_plain": 40, "threepass_plain": 64}
    table = a7_controls.controls_table(
        _control_records(
            {k: series(v) for k, v in real.items()}, with_dropout={k: series(v) for k, v in dropout.items()}
        )
    )
    predicted = dict(zip(table.reading, table.predicted_by_traffic))
    assert predicted[a7_controls.FUSION] == pytest.approx(10 / 6)
    assert table.set_index("reading").dropout_p[a7_controls.FUSION] == 0.1
    assert predicted["add + LN: one pass over two, ordinary stores"] == pytest.approx(7 / 6)
    assert predicted["add + LN: one pass over two, streaming stores"] == pytest.approx(5 / 4)
    assert predicted["add + LN: streaming over ordinary stores, two passes"] == pytest.approx(7 / 5)
    assert predicted["add + LN: streaming over ordinary stores, one pass"] == pytest.approx(6 / 4)
    verdict, evidence = a7_controls.fusion_decision(table)
    assert verdict == "shown" and "±8%" in evidence and "(p = 0.1) deciding" in evidence
    # without the dropout pair (records before 2026-12-07, or no C compiler): no decision
    old = a7_controls.controls_table(_control_records({k: series(v) for k, v in real.items()}))
    assert a7_controls.fusion_decision(old) is None
    # one pass no faster than three: inconclusive; slower than two at p = 0: not shown
    flat = {"onepass_plain": 60, "threepass_plain": 62}
    stores_only = {"eager": 40, "onepass": 35, "onepass_plain": 48, "twopass_nt": 35, "twopass_plain": 48}

    def decide(p0, p1, drift=0.08):
        records = _control_records(
            {k: series(v) for k, v in p0.items()}, drift, with_dropout={k: series(v) for k, v in p1.items()}
        )
        return a7_controls.fusion_decision(a7_controls.controls_table(records))[0]

    assert decide(stores_only, flat) == "inconclusive on this machine"
    assert decide({**stores_only, "onepass_plain": 60}, dropout) == "not shown"
    # a wide drift leaves a small real effect undecided
    assert (
        decide(real, {"onepass_plain": 40, "threepass_plain": 46}, drift=0.3)
        == "inconclusive on this machine"
    )
    assert a7_controls.fusion_decision(a7_controls.controls_table(_control_records({}))) is None


def test_dram_comparisons_are_widened_by_their_measured_drift_between_runs():
    """A7's mechanism reads the DRAM comparisons: their intervals are widened by the measured
    spread of that ratio between fresh runs (params.LN_DRAM_RATIO_DRIFT), the layer's by the
    default; records without the parameter keep the default."""
    from mfulab.measure.timing import RUN_TO_RUN_DRIFT
    from mfulab.studies.fusion.params import LN_DRAM_RATIO_DRIFT

    records = _fake_ln_records(0.100, 0.010, 0.005)
    assert {c["run_to_run_drift"] for c in norm_fusion.comparisons(records)} == {RUN_TO_RUN_DRIFT}
    records["params"] = {"ln_dram_ratio_drift": LN_DRAM_RATIO_DRIFT}
    drifts = {(c["shape"], c["run_to_run_drift"]) for c in norm_fusion.comparisons(records)}
    assert ("dram", LN_DRAM_RATIO_DRIFT) in drifts and all(
        d == RUN_TO_RUN_DRIFT for shape, d in drifts if shape != "dram"
    )


def test_b5_graph_breaks_are_a_row_of_their_own():
    """B5's second sentence is judged apart: not checkable where the profile did not run the
    broken model; on CUDA shown when breaks keep it under the stated 1.09× while the whole graph
    reaches it, not shown when the broken model reaches it too; off CUDA open."""
    import pandas as pd

    from mfulab.studies.fusion import b5_rows

    comp = {"preset": "cpu-small"}

    def table(broken_lo, broken_hi):
        rows = [
            {
                "variant": "compiled (default)",
                "speedup_vs_eager": 1.15,
                "speedup_lo": 1.12,
                "speedup_hi": 1.18,
            },
            {
                "variant": "compiled, graph break per block",
                "speedup_vs_eager": (broken_lo + broken_hi) / 2,
                "speedup_lo": broken_lo,
                "speedup_hi": broken_hi,
                "breaks_taken_per_step": 12,
                "graphs_compiled": 13,
            },
        ]
        return pd.DataFrame(rows).set_index("variant")

    whole_only = table(1.0, 1.0).iloc[:1]
    assert b5_rows.b5_graph_break_claim(whole_only, comp, True).verdict == "not checkable"
    assert b5_rows.b5_graph_break_claim(table(0.95, 1.02), comp, True).verdict == "shown"
    assert b5_rows.b5_graph_break_claim(table(1.10, 1.14), comp, True).verdict == "not shown"
    assert (
        b5_rows.b5_graph_break_claim(table(1.05, 1.12), comp, True).verdict == "inconclusive on this machine"
    )
    off_gpu = b5_rows.b5_graph_break_claim(table(0.95, 1.02), comp, False)
    assert off_gpu.verdict == "inconclusive on this machine" and "12 taken per step" in off_gpu.evidence


def test_a7_layer_row_names_where_the_fused_gain_comes_from():
    """With dropout on, eager's sub-block is mostly random numbers: a fused kernel's gain there is
    its generator's, and the row says so with the p = 0 figure beside it."""
    import pandas as pd

    from mfulab.studies.fusion import claims as fusion_claims

    speed = pd.DataFrame(
        [
            {"shape": "layer", "dropout_p": 0.1, "candidate": "layer: onepass p=0.1", "ratio": 18.6},
            {"shape": "layer", "dropout_p": 0.0, "candidate": "layer: onepass p=0", "ratio": 0.78},
        ]
    ).assign(ratio_lo=lambda d: d.ratio * 0.9, ratio_hi=lambda d: d.ratio * 1.1, baseline="eager")
    rng = pd.DataFrame([{"impl": "eager", "dropout_share_of_sub_block": 0.96}])
    text = fusion_claims._rng_text({"ln_fusion_speedup": speed, "ln_dropout_rng": rng}, "onepass", 0.1)
    assert "18.60× eager's speed at p = 0.1" in text and "96% of its time" in text and "0.78×" in text
    assert fusion_claims._rng_text({"ln_fusion_speedup": speed}, "onepass", 0.1) == ""  # no RNG table
    assert fusion_claims._rng_text({"ln_fusion_speedup": speed, "ln_dropout_rng": rng}, "onepass", 0.0) == ""


def test_a7_layer_row_does_not_credit_a_cheaper_generator_to_fusion():
    """A fused kernel whose only advantage is a cheaper dropout generator (the same p = 0 time as
    eager's, 100× less at p = 0.1) gains nothing once both pay eager's random numbers."""
    records = _fake_ln_records(0.010, 0.100, 0.001)
    lt = layer_measured.layer_table(records)
    assert lt.layer_speedup.iloc[0] == pytest.approx(1.0, abs=0.02)


def test_pointwise_chain_counts_one_loop_and_the_breaks_and_decides_b5s_mechanism():
    """The chain compiled is one loop of 3 reads + 1 write (eager: 7 + 4), broken after every op it
    is four graphs; every variant equals eager; the rows read the table's intervals."""
    import numpy as np
    import pandas as pd

    from mfulab.studies.fusion import pointwise_chain as pc

    if not kernels.compile_status("cpu")[0]:
        pytest.skip("no working torch.compile here")
    rec = {
        "pointwise_chain": pc.measure_pointwise_chain(128, 256, device="cpu", dtype=torch.float32, rounds=2)
    }
    out = rec["pointwise_chain"]
    assert all(r["correct"] for r in out["rows"])
    assert out["graphs_per_shape"] == {"compiled": 1, "compiled, break after every op": 4}
    table = pc.chain_table(rec).set_index(["size", "impl"])
    assert table.loc[("dram", "compiled")].reads_writes == "3 + 1"
    assert table.loc[("dram", "compiled")].predicted_vs_eager == pytest.approx(3.0)

    # the decisions, on synthetic rounds: a fused loop 2.5x eager, the broken chain slower than eager
    # on the small tensor and as slow as eager in DRAM
    rng = np.random.default_rng(0)
    ms = {("dram", "eager"): 90, ("dram", "compiled"): 36, ("dram", pc.IMPLS[2]): 91}
    ms |= {("small", "eager"): 0.02, ("small", "compiled"): 0.015, ("small", pc.IMPLS[2]): 0.06}

    def records(ms):
        rows = [
            {"size": s, "impl": i, "label": f"{s}: {i}", "elements": 10, "correct": True, "median_s": v,
             "q1_s": v, "q3_s": v, "times_s": list(v * 1e-3 * (1 + 0.01 * rng.standard_normal(20)))}
            for (s, i), v in ms.items()
        ]  # fmt: skip
        return {"pointwise_chain": {**out, "rows": rows}, "params": {"ln_dram_ratio_drift": 0.28}}

    r = records(ms)
    t = pc.chain_table(r)
    assert pc.fuser_claim(t, r).verdict == "shown" and pc.graph_break_claim(t, r).verdict == "shown"
    # with the calibrated bandwidth, how close each loop came to its DRAM roof, counted as the LN
    # rows are: eager's 7 + 4 passes of 10 four-byte elements in its median time (90 here), over the
    # copy bandwidth times its roof factor (11 / 15 traffic passes, × 3/2)
    r |= {"bandwidth": {"plateau_bytes_per_s": 1e-5}, "ln": {"dtype_bytes": 4}}
    t = pc.chain_table(r).set_index(["size", "impl"])
    assert t.loc[("dram", "eager")].fraction_of_dram_roof == pytest.approx(
        11 * 10 * 4 / 90 / 1e-5 / (11 / 15 * 1.5)
    )
    assert "of its DRAM roof" in pc.fuser_claim(t.reset_index(), r).evidence
    keeps = records({**ms, ("small", pc.IMPLS[2]): 0.01, ("dram", pc.IMPLS[2]): 36})
    t = pc.chain_table(keeps)
    assert pc.graph_break_claim(t, keeps).verdict == "not shown"
    slower = records({**ms, ("dram", "compiled"): 200})
    assert pc.fuser_claim(pc.chain_table(slower), slower).verdict == "not shown"
    assert pc.fuser_claim(pd.DataFrame(), {}) is None
