"""What a correct multi-rank buckets measurement must show (``make check-node``)."""

from __future__ import annotations

GRADIENT_TOLERANCE = 1e-5  # fp32 DDP gradients against the single-process reference


def node_problems(records: dict) -> list[str]:
    """Every DDP layout's gradients equal the reference's (the gate the sweep records)."""
    worst = max(records["ddp"]["gradient_gate"].values())
    if worst > GRADIENT_TOLERANCE:
        return [f"DDP gradients differ from the reference by {worst:.2e}"]
    return []
