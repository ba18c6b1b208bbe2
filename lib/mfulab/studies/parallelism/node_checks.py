"""What a correct multi-rank parallelism measurement must show (``make check-node``): the
gradient gates the notebook asserts, with the relative tolerance GPU-sized gradients need
(``analysis.gradient_ok``: at gpt2-350m in fp32 they reach 1e2–1e3, and a sharded reduction
order moves them by more than an absolute 1e-4 on a correct run)."""

from __future__ import annotations


def node_problems(records: dict) -> list[str]:
    """FSDP2 against DDP, TP/SP against the whole block, the real pipeline against one process:
    every gate within ``analysis.GRADIENT_TOLERANCE`` of its gradients' scale."""
    from mfulab.studies.parallelism import analysis, measured

    gates = {
        "FSDP2 vs DDP": measured.sharding_table(records)[["gradient_gate", "gradient_scale"]],
        "TP / SP vs the whole block": measured.tensor_table(records)[["max_abs_diff", "gradient_scale"]],
        "pipeline vs one process": measured.pipeline_table(records)[["gradient_gate", "gradient_scale"]],
    }
    problems = []
    for what, table in gates.items():
        table = table.dropna(subset=[table.columns[0]])
        if not len(table):
            continue
        diff, scale = table.iloc[:, 0], table.iloc[:, 1]
        bad = ~analysis.gradient_ok(diff, scale)
        if bad.any():
            worst = float(diff[bad].max())
            tolerance = f"tolerance {analysis.GRADIENT_TOLERANCE:g} × the scale"
            problems.append(f"{what}: gradients differ by {worst:.2e} ({tolerance})")
    return problems
