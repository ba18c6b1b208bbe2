"""A7's LayerNorm + residual + dropout timings (``norm_fusion_bench.measure_ln_fusion``) in a fresh
process whose torch allocates its large tensors on transparent huge pages
(``THP_MEM_ALLOC_ENABLE=1``, read once when torch first allocates, so it must be set before the
process starts).

Why: the sub-block's tensors are hundreds of MiB, and on 4 KiB pages every row of 1024 floats is a
page of its own. The one-pass kernel walks four such streams row by row, eager's ops one or two
long streams each, so TLB misses weigh on the kernels unequally, a CPU artefact a GPU's memory
(large pages) does not have. Timed in one shared process the one-pass kernel read 1.06-1.42x
eager from one fresh run to the next on the 2-core box, and A7's mechanism row flipped; standalone,
three fresh processes with huge pages read 1.53-1.55x. A fresh process also keeps the study's
other work (attention, compile) from shaping these timings' memory. Every implementation is timed
under the same setting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HUGE_PAGES_ENV = {"THP_MEM_ALLOC_ENABLE": "1"}  # c10's CPU allocator: madvise huge pages for ≥ 2 MiB


def measure_in_fresh_process(p, llc_bytes: int | None, cache_floor_bytes: int, num_threads: int) -> dict:
    """``measure_ln_fusion(p, llc_bytes, cache_floor_bytes)`` run by a child process under
    :data:`HUGE_PAGES_ENV` with ``num_threads`` torch threads; its records, with how they ran."""
    from mfulab.results import read_json

    with tempfile.TemporaryDirectory(prefix="mfulab-ln-") as tmp:
        out = Path(tmp) / "ln.json"
        args = {"params": p.to_dict(), "llc": llc_bytes, "floor": cache_floor_bytes, "threads": num_threads}
        done = subprocess.run(
            [sys.executable, "-m", "mfulab.studies.fusion.ln_child", json.dumps(args), str(out)],
            env={**os.environ, **HUGE_PAGES_ENV},
            check=False,
        )
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"the LayerNorm sub-block's timing process failed (exit {done.returncode})")
        rec = read_json(out)
    rec["process"] = {"fresh": True, "env": dict(HUGE_PAGES_ENV), "num_threads": num_threads}
    return rec


def main(argv) -> int:
    import torch

    from mfulab.results import write_json
    from mfulab.studies.fusion.norm_fusion_bench import measure_ln_fusion
    from mfulab.studies.fusion.params import Params

    args = json.loads(argv[0])
    torch.set_num_threads(int(args["threads"]))
    p = Params.from_dict(args["params"])
    write_json(argv[1], measure_ln_fusion(p, args["llc"], args["floor"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
