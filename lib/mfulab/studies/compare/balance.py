"""Machine balance (chapter 10): FLOP per byte of memory traffic, the roofline's ridge point, for
the published devices (datasheet and MAMF over datasheet bandwidth) and each machine measured here
(its matmul ceiling over its measured copy bandwidth)."""

from __future__ import annotations


def machine_balance(published: dict, ceilings: dict, copies: dict):
    """Machine balance, FLOP per byte of memory traffic (Williams, Waterman & Patterson 2009, the
    roofline's ridge point): below it a kernel is memory-bound. Per published device, its dense
    bf16 datasheet peak and its published MAMF (``published``'s matmul rows) over its datasheet
    memory bandwidth (devices.yaml); per machine measured here, its matmul ceiling (``ceilings``:
    ``{machine: (ceiling, peak)}``, FLOP/s) over its measured copy bandwidth (``copies``, B/s,
    bytes read + written). A CPU's figures are fp32 (4 bytes an element), a GPU's bf16 (2): the
    same FLOP per byte is half the FLOP per element on the CPU."""
    import pandas as pd

    from mfulab.analytic.devices import device_spec

    rows = []
    for r in published["references"]:
        if r["quantity"] != "matmul_bf16" or not r.get("device"):
            continue
        spec = device_spec(r["device"])
        if not spec.mem_bytes_per_s:
            continue
        mem_tb_per_s = spec.mem_bytes_per_s / 1e12
        rows.append(
            {
                "machine": r["machine"],
                "basis": "datasheet / published MAMF",
                "memory_TB_per_s": mem_tb_per_s,
                "peak_flop_per_byte": r["spec"] / mem_tb_per_s,
                "best_matmul_flop_per_byte": r["published"] / mem_tb_per_s,
                "dtype": "bf16",
            }
        )
    for machine, (ceiling, peak) in ceilings.items():
        copy = copies.get(machine)
        if not copy:
            continue
        rows.append(
            {
                "machine": machine,
                "basis": "measured here (copy, ceiling); ISA peak",
                "memory_TB_per_s": copy / 1e12,
                "peak_flop_per_byte": peak / copy if peak else None,
                "best_matmul_flop_per_byte": ceiling / copy,
                "dtype": "fp32",
            }
        )
    return pd.DataFrame(rows)


def balance_note(balance) -> str:
    """What the balance says: how many FLOPs a kernel must do per byte it moves to be bound by the
    matmul units rather than memory, here against the published GPUs."""
    if balance.empty:
        return ""
    pub = balance[balance.dtype == "bf16"]
    here = balance[balance.dtype != "bf16"]
    text = (
        f"**Machine balance.** The published GPUs need {pub.best_matmul_flop_per_byte.min():.0f}–"
        f"{pub.best_matmul_flop_per_byte.max():.0f} FLOP per byte of HBM traffic at their best matmul "
        f"({pub.peak_flop_per_byte.min():.0f}–{pub.peak_flop_per_byte.max():.0f} at the datasheet peak)"
    )
    for r in here.itertuples():
        text += f"; {r.machine} {r.best_matmul_flop_per_byte:.0f} at its ceiling over its measured copy"
    return (
        text + ". A kernel below a machine's balance is memory-bound there: an elementwise op (about "
        "one FLOP per element moved) is memory-bound everywhere, but a mid-sized matmul or attention "
        "block bound by the matmul units on this CPU can be memory-bound on a GPU, so a fusion or "
        "recompute saving measured here can under-state the GPU's (the chapters' at-scale analyses "
        "price a GPU from these two datasheet figures, devices.yaml's peak and bandwidth)."
    )
