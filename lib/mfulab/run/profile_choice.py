"""``--profile auto``: a study's ``gpu`` profile where this machine can run it, else ``cpu``
(also where the study has no gpu profile: a new study may start with cpu and smoke only).

A gpu profile that asks for more GPUs than the machine has (parallelism's gpu.yaml wants two
NCCL ranks) is refused by its machine checks before any work; under ``make all`` on a one-GPU
machine that stopped the whole run at that study. ``auto`` then takes the cpu profile and says
why; naming ``--profile gpu`` still gets the refusal.
"""

from __future__ import annotations

import logging

log = logging.getLogger("mfulab")


def gpu_profile_refusal(study_id: str, root=None) -> str | None:
    """Why this machine cannot run ``study_id``'s gpu profile (no CUDA device, too few GPUs), or
    ``None``. A profile that is invalid for another reason is not judged here: running it says so."""
    import torch

    from mfulab.errors import ParameterError
    from mfulab.paths import read_profile, repo_root
    from mfulab.studykit.registry import REGISTRY

    if not torch.cuda.is_available():
        return "no CUDA device"
    path = (root or repo_root()) / "studies" / study_id / "gpu.yaml"
    if not path.exists():
        return "the study has no gpu profile (studies/<id>/gpu.yaml)"
    if study_id not in REGISTRY:
        return None
    try:
        REGISTRY[study_id].params.from_dict(read_profile(path)).prepared()
    except ParameterError as e:
        return str(e) if "GPU" in str(e) else None
    return None


def auto_profile(study_id: str, root=None) -> str:
    why = gpu_profile_refusal(study_id, root)
    if why and why != "no CUDA device":
        log.warning("%s: the gpu profile cannot run here (%s); running the cpu profile", study_id, why)
    return "cpu" if why else "gpu"
