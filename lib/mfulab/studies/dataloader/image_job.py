"""The regime article B §4.1 names for its loader advice: CV and multimodal jobs, whose samples
are images in many small files ("尤其是CV和多模态任务用的海量小文件数据"). A text loader is no test
of it: at the case study's job one loader process reads 51-300× what a rank needs
(``text_job.required_vs_available``). An image costs a decode and an augmentation on a CPU
core, so the worker count and the file format can decide the GPU's rate.

The job: ResNet-50 v1.5 on A100s as NVIDIA publishes it (DeepLearningExamples, stated in
``stated.A100_RESNET50``): images/s per GPU, 256 images per GPU step, 10 loader workers per GPU
on a DGX A100 (16 CPU cores per GPU). The per-image CPU cost is measured here
(:func:`decode_probe`: a JPEG of ImageNet's mean size decoded, cropped and resized to 224², flipped
and turned into a normalised float array with PIL and NumPy on one core). Each worker then pays
that cost per image, plus one open at a published network-file-system latency per image where
each image is its own file (``params.PUBLISHED_FILE_LATENCIES_S``); tar shards pay the decode
only. The wait per step is the course's one loader model (``hiding.predicted_wait_s``: W workers
prefetching, a batch's cost / W against the step)."""

from __future__ import annotations

import time

from mfulab.studies.dataloader.hiding import predicted_wait_s
from mfulab.studies.dataloader.params import PUBLISHED_FILE_LATENCIES_S
from mfulab.studies.dataloader.stated import A100_RESNET50, B11_STATED, IMAGENET_MEAN_JPEG_BYTES


def synthetic_jpeg(*, width: int = 500, height: int = 375, target_bytes: int = IMAGENET_MEAN_JPEG_BYTES):
    """JPEG bytes of a seeded photo-like image (smooth colour fields plus grain) at ImageNet's
    mean size: the quality is searched so that the file lands near ``target_bytes``, since a
    decoder's cost grows with the entropy it has to undo."""
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([128 + 90 * np.sin(x / 37 + c) * np.cos(y / 23 - c) for c in (0.0, 1.3, 2.6)], axis=-1)
    best = None
    for grain in (4, 8, 12, 16, 24, 32, 48):
        pixels = np.clip(base + rng.normal(0, grain, base.shape), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
        data = buf.getvalue()
        if best is None or abs(len(data) - target_bytes) < abs(len(best) - target_bytes):
            best = data
    return best


def decode_one(data: bytes, rng) -> float:
    """One training sample from JPEG bytes, as a torchvision ImageNet pipeline makes it (decode,
    RandomResizedCrop to 224² with scale 0.08-1 and ratio 3/4-4/3, horizontal flip, to float and
    normalised); returns a checksum of the array so that the work cannot be skipped."""
    import io
    import math

    import numpy as np
    from PIL import Image

    img = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = img.size
    area = w * h * rng.uniform(0.08, 1.0)
    ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
    cw, ch = min(w, int(round(math.sqrt(area * ratio)))), min(h, int(round(math.sqrt(area / ratio))))
    left, top = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    img = img.resize((224, 224), Image.BILINEAR, box=(left, top, left + cw, top + ch))
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    array = np.asarray(img, dtype=np.float32) / 255.0
    array = (array - np.array([0.485, 0.456, 0.406], np.float32)) / np.array(
        [0.229, 0.224, 0.225], np.float32
    )
    return float(array[::37, ::41].sum())


def decode_probe(*, images: int, rounds: int, seed: int = 0) -> dict:
    """Seconds per image of :func:`decode_one` on this process's one core, ``rounds`` rounds of
    ``images`` images after one warm-up image: each round's mean, and the JPEG's bytes. The same
    seed gives the same crops, so a round's checksum is the correctness gate."""
    import numpy as np

    data = synthetic_jpeg()
    decode_one(data, np.random.default_rng(seed))  # warm-up: imports, allocator
    per_image_s, checksums = [], []
    for _ in range(rounds):
        rng = np.random.default_rng(seed)
        t0 = time.perf_counter()
        checksums.append(sum(decode_one(data, rng) for _ in range(images)))
        per_image_s.append((time.perf_counter() - t0) / images)
    return {
        "jpeg_bytes": len(data),
        "images_per_round": images,
        "per_image_s": per_image_s,
        "checksums_agree": len({round(c, 3) for c in checksums}) == 1,
    }


def workers_needed(images_per_s: float, decode_s: float, latency_s: float = 0.0) -> float:
    """Loader workers (one core each) that keep a GPU at ``images_per_s`` when every image costs
    ``decode_s`` of CPU plus ``latency_s`` of waiting for its file."""
    return images_per_s * (decode_s + latency_s)


def image_job_table(decode_s: float, *, latencies_s=PUBLISHED_FILE_LATENCIES_S, workers=None):
    """One row per (published rate, worker count, latency per file): the GPU's step, the wait per
    step with small files and with tar shards (``hiding.predicted_wait_s``), tar's training gain,
    and the workers that would keep the GPU fed either way. ``workers``: counts per GPU (default:
    NVIDIA's 10, the article's 12, and 8 and 16, the ends of its range)."""
    import pandas as pd

    job = A100_RESNET50
    lo, hi = B11_STATED["workers_enough"]
    counts = workers or sorted({lo, job["workers_per_gpu"], B11_STATED["workers_per_gpu"], hi})
    rows = []
    for precision, images_per_s in job["images_per_s_per_gpu"].items():
        step_s = job["batch_per_gpu"] / images_per_s
        for n_workers in counts:
            tar_wait_s = predicted_wait_s(
                batch=job["batch_per_gpu"], latency_s=decode_s, workers=n_workers, step_s=step_s
            )
            for latency_s in latencies_s:
                small_wait_s = predicted_wait_s(
                    batch=job["batch_per_gpu"],
                    latency_s=decode_s + latency_s,
                    workers=n_workers,
                    step_s=step_s,
                )
                rows.append(
                    {
                        "precision": precision,
                        "images_per_s_per_gpu": images_per_s,
                        "workers_per_gpu": n_workers,
                        "latency_ms": latency_s * 1e3,
                        "gpu_step_s": step_s,
                        "wait_small_files_s": small_wait_s,
                        "wait_tar_s": tar_wait_s,
                        "tar_training_gain": (step_s + small_wait_s) / (step_s + tar_wait_s),
                        "workers_needed_tar": workers_needed(images_per_s, decode_s),
                        "workers_needed_small_files": workers_needed(images_per_s, decode_s, latency_s),
                    }
                )
    return pd.DataFrame(rows)


def decode_range_for_gain(
    images_per_s: float, workers: int, latency_s: float, gain: float
) -> tuple[float, float]:
    """The per-image decode costs (s) for which tar gains at least ``gain`` over small files while
    tar's own loader keeps the GPU at ``images_per_s`` (the hiding model's steady state: small files
    take rate · (decode + latency) / workers of the step, tar none): from
    max(0, gain · workers / rate − latency) to workers / rate (empty where the first exceeds the
    second). The decode measured here is one point in it; the range says how much rides on it."""
    keeps_up_s = workers / images_per_s
    return max(0.0, gain * keeps_up_s - latency_s), keeps_up_s


def median_decode_s(records) -> float | None:
    """The probe's per-image seconds (median over rounds); None where it was not measured."""
    import statistics

    probe = records.get("image_decode") if records else None
    return statistics.median(probe["per_image_s"]) if probe else None
