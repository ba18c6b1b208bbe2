"""Study ``compare`` (notebook 07): every machine's metrics side by side.

It measures nothing: each study declares its metrics (key, unit, label) in its ``STUDY``,
writes them flat into ``results/<machine>/<study>/metrics.json``, and ``analysis`` reads
them for every machine found under ``results/``. Results produced elsewhere can be dropped
into ``results/<machine>/`` and compared as long as their ``metrics.json`` carries those keys;
a missing study or key shows as *missing*.
"""

from .. import Study
from .params import Params

STUDY = Study(
    id="compare", number=7, notebook="07_compare_machines.py",
    title="Machines side by side: ceilings, MFU, collectives, fusion, recompute, buckets, data",
    summary="every machine's results side by side",
    params=Params, headline_figure="ceilings", measure="mfulab.studies.compare.analysis:collect",
    machine="comparison", reads_results=True,
)
