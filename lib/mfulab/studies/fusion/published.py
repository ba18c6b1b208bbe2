"""Rows decided on published measurements: B5's size at the claim's model size
(``stated.B5_PUBLISHED_PAIRS``), read by id from chapter 10's published-runs file, where each
row is cited and checked; B3's HBM-traffic sentence on FlashAttention's paper."""

from __future__ import annotations

from mfulab.paths import repo_root
from mfulab.studies.fusion.stated import (
    B3_FLASH_PUBLISHED,
    B3_SEVERAL_FOLD,
    B5_PUBLISHED_FILE,
    B5_PUBLISHED_PAIRS,
    B5_STATED_TIME_CUT,
)
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim


def b5_published_context() -> str:
    """B5's size beside the published measurement at its model size (``stated.B5_PUBLISHED_PAIRS``:
    torchtitan's Llama 3 8B on H100s, eager FSDP against FSDP + torch.compile, tokens/s per GPU):
    the step-time cut 1 − eager ÷ compiled. The article's 8–12% is its own run, whose framework,
    devices and compile mode it does not state, so another configuration's figure cannot decide
    it: context in the one B5 row on the sentence (until 2026-12-07 a row of its own, not
    checkable, beside the measured one: two verdicts on one sentence). Empty without the rows."""
    import yaml

    path = repo_root() / B5_PUBLISHED_FILE
    if not path.exists():
        return ""
    rows = {r["id"]: r for r in yaml.safe_load(path.read_text())["runs"]}
    pairs = [(rows[e], rows[c]) for e, c in B5_PUBLISHED_PAIRS if e in rows and c in rows]
    if not pairs:
        return ""
    lo, hi = B5_STATED_TIME_CUT
    cuts = [
        1 - e["published"]["tokens_per_s_per_gpu"] / c["published"]["tokens_per_s_per_gpu"] for e, c in pairs
    ]
    listed = "; ".join(
        f"{e['layout']['n_devices']} GPUs ({_table(c['citation'])}): "
        f"{e['published']['tokens_per_s_per_gpu']:,} → {c['published']['tokens_per_s_per_gpu']:,} tokens/s "
        f"per GPU, a {cut:.1%} shorter step"
        for (e, c), cut in zip(pairs, cuts)
    )
    side = (
        f"{(min(cuts) - hi) * 100:.1f} to {(max(cuts) - hi) * 100:.1f} points past its top"
        if min(cuts) > hi
        else f"{(lo - max(cuts)) * 100:.1f} to {(lo - min(cuts)) * 100:.1f} points below its bottom"
        if max(cuts) < lo
        else "inside it"
    )
    return (
        f"published, at the claim's model size ({_file(pairs[0][0]['citation'])}: Llama 3 8B, FSDP eager vs "
        f"FSDP + torch.compile, bf16, the same layout): {listed}, the same sign and order as the stated "
        f"{lo:.0%}–{hi:.0%}, {side}; context, not a test: the article's framework and devices are not "
        'stated, and its code compiles with mode="reduce-overhead" (CUDA graphs), while torchtitan '
        "compiles each block in the default mode under FSDP"
    )


def _table(citation: str) -> str:
    """The table a published-runs citation names ("Table 3 row …" → "Table 3")."""
    import re

    found = re.search(r"Table \d+", citation)
    return found.group(0) if found else "its table"


def _file(citation: str) -> str:
    """A published-runs citation without its table and row: the file and commit."""
    return citation.split(", Table")[0]


def b3_hbm_claim() -> Claim:
    """Article B's FlashAttention sentence, "the same attention, HBM reads and writes cut
    several-fold", from the published measurement (``stated.B3_FLASH_PUBLISHED``): confirmed when
    standard ÷ flash HBM traffic is at least ``stated.B3_SEVERAL_FOLD`` (refuted below)."""
    f = B3_FLASH_PUBLISHED
    std, fl = f["standard"], f["flash"]
    cut = std["hbm_gb"] / fl["hbm_gb"]
    return Claim(
        "B3",
        "FlashAttention cuts the same attention's HBM reads and writes several-fold",
        f"{f['citation']}: {f['workload']}; several-fold read as ≥ {B3_SEVERAL_FOLD:g}×",
        verdicts.verdict_from_agreement(cut >= B3_SEVERAL_FOLD),
        f"HBM reads + writes {std['hbm_gb']:g} → {fl['hbm_gb']:g} GB ({cut:.1f}× fewer; "
        f"{f['v1_standard_hbm_gb']:g} GB standard in the paper's first version: "
        f"{f['v1_standard_hbm_gb'] / fl['hbm_gb']:.1f}×) while the FLOPs rise {std['gflops']:g} → "
        f"{fl['gflops']:g} G (the backward recomputes the scores); runtime {std['runtime_ms']:g} → "
        f"{fl['runtime_ms']:g} ms ({std['runtime_ms'] / fl['runtime_ms']:.1f}×)",
        basis=verdicts.PUBLISHED,
    )
