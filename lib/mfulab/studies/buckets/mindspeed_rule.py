"""Article A's sentence on MindSpeed's default gradient buckets, against the DDP that MindSpeed
runs (Megatron-Core's ``DistributedDataParallel``, ``stated.MEGATRON_BUCKET_RULE_SOURCE``, the
rule ``comm.dp_collectives`` prices Megatron with): one row for the mechanism, one for the size,
one for the flag the article names."""

from __future__ import annotations

from mfulab.analytic.comm import MEGATRON_BUCKET_ELEMS_PER_RANK, MEGATRON_MIN_BUCKET_ELEMS
from mfulab.studies.buckets.stated import (
    A6_CARDS,
    A6_PER_TENSOR_CASE,
    MEGATRON_BUCKET_RULE_SOURCE,
    MINDSPEED_BUCKET_RULE_SOURCE,
    SCALE_GRAD_BYTES_PER_ELEM,
)
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim
from mfulab.units import MB

EXAMPLE_MB = 25  # the sentence's "比如 25MB"


def default_bucket_mb(dp: int) -> float:
    """Megatron-Core's default bucket, max(40M, 1M × DP) parameters of fp32 gradient, in MB."""
    elems = max(MEGATRON_MIN_BUCKET_ELEMS, MEGATRON_BUCKET_ELEMS_PER_RANK * dp)
    return elems * SCALE_GRAD_BYTES_PER_ELEM / MB


def a6_megatron_default_claims(records) -> list[Claim]:
    """ "MindSpeed's default strategy: in parameter order, seal a bucket once the gradients reach a
    set size (for example 25 MB)", as two statements. The mechanism, a bucket sealed at a size, is
    the documented rule: confirmed. The size has two readings: an example of "a set size" (which
    nothing can refute) or the default's size, which the documented rule puts at 160 MB up to DP
    40 and more beyond: the readings disagree, not checkable, both in the evidence."""
    tp = A6_PER_TENSOR_CASE["tp"]
    dp_article = A6_CARDS // tp
    sources = (
        f"{MEGATRON_BUCKET_RULE_SOURCE}; {MINDSPEED_BUCKET_RULE_SOURCE}; fp32 gradients "
        f"({SCALE_GRAD_BYTES_PER_ELEM:g} B each, Megatron's default for bf16 runs)"
    )
    return [
        Claim(
            "A6",
            "MindSpeed's default seals a gradient bucket once it reaches a set size, in parameter order",
            sources,
            "confirmed",
            "the mechanism holds in Megatron-Core and in MindSpeed's own initialiser, which keeps the rule "
            "(buckets sealed at a size, so that each reduces while the backward goes on); its gradient "
            "buffer is laid out in reverse parameter order (the backward's), so the buckets follow the "
            "buffer's storage order, not the model's; with --overlap-grad-reduce off there is one bucket",
            basis=verdicts.DOCUMENTED,
        ),
        Claim(
            "A6",
            f"the default's set size is about {EXAMPLE_MB} MB (比如 {EXAMPLE_MB}MB)",
            sources,
            "not checkable",
            f"read as the default's size: false, the default bucket is {default_bucket_mb(1):.0f} MB of fp32 "
            f"gradient up to DP 40 and {default_bucket_mb(dp_article):.0f} MB at about a thousand cards "
            f"(TP {tp} × DP {dp_article}), {default_bucket_mb(1) / EXAMPLE_MB:.1f}–"
            f"{default_bucket_mb(dp_article) / EXAMPLE_MB:.0f}× the {EXAMPLE_MB} MB (it grows with DP so "
            "that calls stay bandwidth-bound); read as an example of a set size ('比如'): nothing to refute. "
            "The readings disagree",
            basis=verdicts.DOCUMENTED,
        ),
        Claim(
            "A6",
            "MindSpeed's flag for the bucket size is --gradient-bucket-size, in MB (对应的配置项是 "
            "--gradient-bucket-size，单位是 MB)",
            "Megatron-LM's argument parser (megatron/training/arguments.py) and MindSpeed's additions to "
            "it (Ascend/MindSpeed mindspeed/arguments.py, MindSpeed-LLM's training/arguments.py)",
            "refuted",
            "neither defines --gradient-bucket-size (the course's search of their sources, 2026-12-06); "
            "Megatron-LM's flag is --ddp-bucket-size, counted in parameters, not MB, and MindSpeed keeps "
            "Megatron-Core's rule above; argparse would stop the command at the unknown flag (chapter 04's "
            "A17 row on the same command)",
            basis=verdicts.DOCUMENTED,
        ),
    ]
