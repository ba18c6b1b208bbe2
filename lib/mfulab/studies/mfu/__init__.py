"""Study ``mfu`` (notebook 01): what MFU means under each FLOPs convention and denominator,
and where a measured step's time goes.

- ``params``: the parameters (defaults: the laptop profile);
- ``bench``: the measurement (torch, headless: ``python -m mfulab measure mfu``);
- ``analysis``: tables, the time split and the claims table (A19, B1, B2, B15, A1);
- ``figures``: the charts; ``stated``: the articles' inputs with their citations.
"""

from .. import Metric, Study
from .params import Params

STUDY = Study(
    id="mfu", number=1, notebook="01_mfu_accounting.py",
    title="MFU accounting: conventions, denominators, where a step's time goes",
    summary="what MFU means under each FLOPs convention and denominator; where a measured step's time goes",
    params=Params, headline_figure="waterfall", measure="mfulab.studies.mfu.bench:measure",
    claims=("A19", "B1", "B2", "B15", "A1"),
    metrics=(
        Metric("matmul_ceiling_flops_per_s", "FLOP/s", "measured matmul ceiling", headline=True),
        Metric("datasheet_peak_flops_per_s", "FLOP/s", "datasheet peak (dense)"),
        Metric("ceiling_over_datasheet", "fraction", "ceiling / datasheet", "{:.1%}"),
        Metric("steady_mfu_vs_ceiling", "fraction", "MFU of the reference step (vs measured ceiling)", "{:.1%}",
               headline=True),
        Metric("steady_tokens_per_s", "tokens/s", "tokens/s of the reference step", "{:,.0f}", headline=True),
        Metric("memory_bandwidth_bytes_per_s", "B/s", "memory bandwidth (copy)"),
    ),
)
