"""When PyTorch's CUDA flash-attention kernel is *not* eligible (claim B3): the filters of
``sdp::can_use_flash_attention`` as plain rules, so that a run on a CPU can say what its
inputs would get on a GPU without generalising the CPU's dispatch.

Source: PyTorch ``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`` (main branch,
commit 001f694a; ``can_use_flash_attention`` and the ``check_*`` functions it lists) and,
for the CPU, ``aten/src/ATen/native/transformers/sdp_utils_cpp.cpp``
(``use_flash_attention_cpp``). SDPA tries the backends in priority order (cuDNN on
sm90/sm100 with a recent cuDNN, then flash, memory-efficient, math) and takes the first
whose filters all pass; a rejected flash kernel is a silent fallback, not an error. Rules
differ between versions (PyTorch 2.0's flash kernel required head dim ≤ 128 and a
multiple of 8); these are the ones of the cited source.
"""

from __future__ import annotations

SOURCE = (
    "PyTorch aten/src/ATen/native/transformers/cuda/sdp_utils.cpp @ 001f694a "
    "(can_use_flash_attention); CPU: sdp_utils_cpp.cpp (use_flash_attention_cpp)"
)
FLASH_DTYPES = ("fp16", "bf16")  # check_dtypes_flash_attention (sm80+; FA3 adds fp8 on sm90)
FLASH_MAX_HEAD_DIM = 256  # check_head_dim_size_flash (q, k, v equal last dims)
FLASH_SM_RANGE = ((8, 0), (12, 1))  # check_flash_attention_hardware_support: [sm80, sm121]

# The rules as a table for the notebook: (filter in sdp_utils.cpp, what makes flash ineligible).
CUDA_FLASH_RULES = (
    ("check_dtypes_flash_attention", "inputs not fp16/bf16 (fp32 goes to memory-efficient or math)"),
    ("check_for_attn_mask", "an explicit attn_mask tensor (is_causal=True is fine)"),
    ("check_head_dim_size_flash", f"q, k, v head dims differ, or exceed {FLASH_MAX_HEAD_DIM}"),
    ("check_flash_attention_hardware_support", "GPU outside sm80–sm121 (V100, T4: sm70/sm75)"),
    (
        "check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120",
        "training on sm86/89/120 with head dim in (192, 224], or in (224, 256] with dropout",
    ),
    ("check_flash_causal_non_square_seqlens", "is_causal with query length ≠ key length"),
    ("check_last_dim_stride_equals_1_dense", "a last dimension that is not contiguous"),
    ("check_runtime_disabled_flash", "torch.backends.cuda.enable_flash_sdp(False) or a sdpa_kernel context"),
)
CPU_FLASH_RULES = (
    ("check_for_dropout", "dropout_p > 0 (the CPU flash kernel has no dropout: math fallback)"),
    ("check_head_dim_size_cpp", "q, k, v head dims differ"),
    ("cpp_supported_flash_dtypes", "dtype other than fp32, fp64, bf16, fp16"),
)


def cuda_flash_ineligible(
    *,
    dtype: str,
    head_dim: int,
    v_head_dim: int | None = None,
    has_attn_mask: bool = False,
    is_causal: bool = True,
    seq_q: int | None = None,
    seq_k: int | None = None,
    sm: tuple[int, int] = (8, 0),
    requires_grad: bool = True,
    dropout_p: float = 0.0,
) -> list[str]:
    """The reasons PyTorch's CUDA flash kernel would refuse these inputs (empty: eligible),
    following ``can_use_flash_attention`` (module docstring); ``sm`` is the GPU's compute
    capability, A100 (8, 0) unless given."""
    reasons = []
    if dtype not in FLASH_DTYPES:
        reasons.append(f"{dtype} inputs (flash takes {' / '.join(FLASH_DTYPES)})")
    if has_attn_mask:
        reasons.append("an explicit attn_mask")
    v_dim = head_dim if v_head_dim is None else v_head_dim
    if v_dim != head_dim or head_dim > FLASH_MAX_HEAD_DIM:
        reasons.append(f"head dims {head_dim}/{v_dim} (equal and ≤ {FLASH_MAX_HEAD_DIM} required)")
    (lo, hi) = FLASH_SM_RANGE
    if not lo <= sm <= hi:
        reasons.append(f"sm{sm[0]}{sm[1]} is outside sm{lo[0]}{lo[1]}–sm{hi[0]}{hi[1]}")
    training_sm = (8, 6) <= sm <= (8, 9) or (12, 0) <= sm <= (12, 1)
    if requires_grad and training_sm and (192 < head_dim <= 224 or (head_dim > 224 and dropout_p > 0)):
        reasons.append(f"training with head dim {head_dim} on sm{sm[0]}{sm[1]}")
    if is_causal and seq_q is not None and seq_k is not None and seq_q != seq_k:
        reasons.append(f"is_causal with query length {seq_q} ≠ key length {seq_k}")
    return reasons


def rules_table():
    """Both rule lists as one DataFrame (device, filter, ineligible when)."""
    import pandas as pd

    rows = [{"device": "CUDA", "filter": f, "flash ineligible when": w} for f, w in CUDA_FLASH_RULES]
    rows += [{"device": "CPU", "filter": f, "flash ineligible when": w} for f, w in CPU_FLASH_RULES]
    return pd.DataFrame(rows)
