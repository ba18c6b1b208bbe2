"""Claim A2, where tensor parallelism's all-reduce sits, counted on PyTorch's own tensor
parallelism (``tp_mlp_collectives``, run on every rank of the overlap job) and judged
(``a2_claim``).

Article A §2.1 describes a TP MLP as a column-parallel linear, then a *data-parallel*
all-reduce that sums the cards' partial results, then a row-parallel linear. In Megatron's
layout (Shoeybi et al. 2019 §3, Fig. 3a) the column-parallel output stays split along the
hidden dimension, so the GeLU and the row-parallel linear run on each card's own columns with
no communication between the two linears; the one forward all-reduce (their operator *g*) sums
the row-parallel linear's partial outputs, in the tensor-parallel group; a data-parallel
all-reduce moves gradients, once per step after backward, never activations.
"""

from __future__ import annotations

from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim

GATE_MAX_ABS_DIFF = 1e-4  # fp32: the sharded MLP's output against the same MLP run whole


def tp_mlp_collectives(device: str, d_model: int = 64) -> dict:
    """Claim A2's layout, counted: a two-linear MLP under PyTorch's own tensor parallelism
    (``parallelize_module``: the first linear ``ColwiseParallel``, the second ``RowwiseParallel``,
    Megatron's layout, Shoeybi et al. 2019 §3) over every rank of the job, one forward + backward
    under DTensor's ``CommDebugMode``. Returns the collectives per module and pass (the first
    linear's, the second's) and the largest |Δ| of the output against the same MLP run whole
    (the correctness gate)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = torch.nn.Linear(d_model, 4 * d_model), torch.nn.Linear(4 * d_model, d_model)

        def forward(self, x):
            return self.down(torch.nn.functional.gelu(self.up(x)))

    torch.manual_seed(0)
    whole = MLP().to(device)
    torch.manual_seed(0)
    sharded = MLP().to(device)
    mesh = init_device_mesh(device, (torch.distributed.get_world_size(),))
    parallelize_module(sharded, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    x = torch.randn(4, 16, d_model, generator=torch.Generator().manual_seed(1)).to(device)
    x.requires_grad_(True)
    mode = CommDebugMode()
    with mode:
        out = sharded(x)
        out.pow(2).sum().backward()
    per_module = {}
    for fqn, passes in mode.comm_module_counts.items():
        name = fqn.split(".")[-1] if "." in fqn else None
        if name in ("up", "down"):
            for pass_, ops in passes.items():
                for op, n in ops.items():
                    key = f"{name}:{pass_}:{str(op).split('.')[-1]}"
                    per_module[key] = per_module.get(key, 0) + int(n)
    with torch.no_grad():
        max_abs_diff = float((out.detach() - whole(x.detach())).abs().max())
    totals = {str(op).split(".")[-1]: int(n) for op, n in mode.get_comm_counts().items()}
    return {"per_module": per_module, "totals": totals, "max_abs_diff": max_abs_diff, "d_model": d_model}


def a2_table(records):
    """The counted collectives of A2's MLP, one row per (linear, pass, collective)."""
    import pandas as pd

    tp = records["overlap"].get("tp_mlp") or {"per_module": {}}
    linear = {"up": "column-parallel (first)", "down": "row-parallel (second)"}
    rows = []
    for key, n in sorted(tp["per_module"].items()):
        name, pass_, op = key.split(":")
        rows.append({"linear": linear[name], "pass": pass_, "collective": op, "calls": n})
    return pd.DataFrame(rows, columns=["linear", "pass", "collective", "calls"])


def a2_claim(records) -> Claim | None:
    """A2 on a published basis (Megatron's layout, Shoeybi et al. 2019 §3, Fig. 3a), with the
    count on PyTorch's own tensor parallelism as its illustration: refuted when that count agrees
    (no collective in the column-parallel linear's forward, exactly one all-reduce in the
    row-parallel linear's, the sharded output equal to the whole one), otherwise not checkable,
    with the counts."""
    tp = records["overlap"].get("tp_mlp")
    if tp is None:
        return None
    counts, n = tp["per_module"], records["overlap"]["world_size"]
    up_fwd = sum(v for k, v in counts.items() if k.startswith("up:forward"))
    down_ar = counts.get("down:forward:all_reduce", 0)
    down_other = sum(
        v for k, v in counts.items() if k.startswith("down:forward") and not k.endswith(":all_reduce")
    )
    gate = tp["max_abs_diff"] <= GATE_MAX_ABS_DIFF
    holds = gate and up_fwd == 0 and down_ar == 1 and down_other == 0
    back = sum(v for k, v in counts.items() if ":backward:" in k)
    return Claim(
        "A2",
        "in a TP MLP a data-parallel all-reduce sums the column-parallel linear's results before the "
        "row-parallel linear",
        f"one forward + backward of a TP MLP (ColwiseParallel → RowwiseParallel, {n} ranks), "
        "collectives per linear (CommDebugMode); output gated against the MLP whole",
        "refuted" if holds else "not checkable",
        f"forward: {up_fwd} collectives in the column-parallel linear, {down_ar} all-reduce of the "
        f"row-parallel one's partial sums (TP group); backward: {back}; gate max |Δ| "
        f"{tp['max_abs_diff']:.1e}. Megatron's layout (Shoeybi et al. 2019 §3, Fig. 3a): the one forward "
        "all-reduce follows the row-parallel linear; DP all-reduces gradients after backward",
        basis=verdicts.DOCUMENTED,
    )
