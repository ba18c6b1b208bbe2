"""Dataloader formats: round trips at several worker counts (fork and spawn), corrupt inputs,
page-cache eviction, units, parameters, and the smoke profile end to end."""

import json
import os
import pickle

import pytest

from mfulab.config import ParameterError
from mfulab.studies.dataloader import analysis, bench, formats
from mfulab.studies.dataloader import corpus as corpus_mod
from mfulab.studies.dataloader.params import FORMATS, Params


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    samples = corpus_mod.synthetic_corpus(n_samples=120, mean_bytes=200, length_sigma=0.8, seed=1)
    for fmt in FORMATS:
        formats.write_format(fmt, samples, root, shard_samples=25)
    return root, samples, corpus_mod.corpus_checksum(samples)


def _loader(fmt, root, workers, **kw):
    return formats.make_loader(
        fmt,
        root,
        batch_size=16,
        seq_len=64,
        num_workers=workers,
        prefetch_factor=2,
        persistent=False,
        pin_memory=False,
        **kw,
    )


def test_corpus_is_deterministic():
    a = corpus_mod.synthetic_corpus(n_samples=50, mean_bytes=300, length_sigma=0.5, seed=7)
    b = corpus_mod.synthetic_corpus(n_samples=50, mean_bytes=300, length_sigma=0.5, seed=7)
    assert a == b and len({s["key"] for s in a}) == 50
    assert corpus_mod.tokenize("hé").tolist() == [104, 195, 169]  # byte-level


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("workers", [0, 2])
def test_round_trip(corpus, fmt, workers):
    root, _, expected = corpus
    epoch = bench.run_epochs(_loader(fmt, root, workers), 1, expected)[0]
    assert epoch["intact"] and epoch["samples"] == 120


@pytest.mark.parametrize("fmt", FORMATS)
def test_datasets_and_collate_pickle(corpus, fmt):
    """Every Dataset and the collate function are module-level and pickle (the ``spawn``
    start method sends them to each worker); the memmap reader pickles without its tokens."""
    root, _, _ = corpus
    ds = formats.dataset(fmt, root)
    again = pickle.loads(pickle.dumps(ds))
    assert type(again) is type(ds)
    if fmt == "memmap":
        assert len(pickle.dumps(ds)) < (root / "memmap" / "tokens.bin").stat().st_size
        assert [again[i][0] for i in range(3)] == [ds[i][0] for i in range(3)]
        assert all((again[i][1] == ds[i][1]).all() for i in range(3))
    collate = pickle.loads(pickle.dumps(formats.Collate(64)))
    assert collate.seq_len == 64


@pytest.mark.parametrize("fmt", FORMATS)
def test_spawned_worker_delivers_the_corpus(corpus, fmt):
    """``num_workers > 0`` under ``spawn`` (macOS default, recommended with CUDA): every
    sample arrives, with its key and tokens unchanged (count and checksum of the corpus)."""
    root, samples, expected = corpus
    loader = _loader(fmt, root, 1, multiprocessing_context="spawn")
    epoch = bench.run_epochs(loader, 1, expected)[0]
    assert epoch["samples"] == len(samples) and epoch["intact"]


def test_malformed_json_names_the_file(corpus, tmp_path):
    root, samples, _ = corpus
    formats.write_format("json_files", samples[:5], tmp_path, shard_samples=5)
    bad = sorted((tmp_path / "json_files").iterdir())[2]
    bad.write_text('{"key": "00000002", "text": ')
    ds = formats.JsonFiles(tmp_path)
    with pytest.raises(formats.DataError, match=bad.name):
        ds[2]


def test_missing_file_names_the_file(tmp_path):
    samples = corpus_mod.synthetic_corpus(n_samples=5, mean_bytes=100, length_sigma=0.5, seed=0)
    formats.write_format("json_files", samples, tmp_path, shard_samples=5)
    ds = formats.JsonFiles(tmp_path)
    gone = ds.files[1]
    os.remove(gone)
    with pytest.raises(formats.DataError, match="missing"):
        ds[1]
    with pytest.raises(formats.DataError, match="jsonl"):
        formats.Jsonl(tmp_path)


def test_malformed_jsonl_line_names_line_and_offset(tmp_path):
    samples = corpus_mod.synthetic_corpus(n_samples=4, mean_bytes=100, length_sigma=0.5, seed=0)
    formats.write_format("jsonl", samples, tmp_path, shard_samples=4)
    path = tmp_path / "jsonl" / "data.jsonl"
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:-5]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(formats.DataError, match="line 3 .byte offset"):
        formats.Jsonl(tmp_path)[2]


def test_truncated_tar_shard_names_the_shard(tmp_path):
    samples = corpus_mod.synthetic_corpus(n_samples=60, mean_bytes=300, length_sigma=0.5, seed=0)
    formats.write_format("tar", samples, tmp_path, shard_samples=30)
    shard = sorted((tmp_path / "tar").iterdir())[1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2 + 7])
    with pytest.raises(formats.DataError, match=shard.name):
        list(formats.TarShards(tmp_path))


def test_truncated_memmap_and_corrupt_parquet(tmp_path):
    samples = corpus_mod.synthetic_corpus(n_samples=20, mean_bytes=100, length_sigma=0.5, seed=0)
    formats.write_format("memmap", samples, tmp_path, shard_samples=10)
    formats.write_format("parquet", samples, tmp_path, shard_samples=10)
    tokens = tmp_path / "memmap" / "tokens.bin"
    tokens.write_bytes(tokens.read_bytes()[:100])
    with pytest.raises(formats.DataError, match="truncated"):
        formats.Memmap(tmp_path)
    pq = tmp_path / "parquet" / "data.parquet"
    pq.write_bytes(b"PAR1 not really parquet")
    with pytest.raises(formats.DataError, match="data.parquet"):
        formats.ParquetRowGroups(tmp_path)


def test_evict_takes_effect(tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(os.urandom(4 << 20))
    with open(path, "rb") as f:
        f.read()
    assert bench.resident_fraction(path) > 0.5
    bench.evict([path])
    assert bench.resident_fraction(path) < 0.2


def test_free_space_check(tmp_path):
    with pytest.raises(ParameterError, match="free"):
        corpus_mod.check_free_space(tmp_path, 1 << 60)


def test_throughput_unit_is_mib_per_s(corpus):
    """``mib_per_s`` is MiB/s (2**20 bytes per second), not MB/s (1e6), and the sweep rows say so."""
    assert bench.mib_per_s(3 * 2**20, 1.5) == pytest.approx(2.0)
    assert bench.mib_per_s(10**6, 1.0) == pytest.approx(0.95367, rel=1e-4)
    root, _, expected = corpus
    p = Params(
        device="cpu", formats=["memmap"], num_workers=[0], epochs=2, cold=False, batch_size=16, seq_len=64
    )
    written = {"memmap": {"bytes": 5 * 2**20}}  # a known byte count
    rows = bench.loader_sweep(p, root, expected, written)
    assert len(rows) == 2 and all("mb_per_s" not in r for r in rows)
    for r in rows:
        assert r["mib_per_s"] == pytest.approx(5 / r["epoch_s"])


def test_older_records_read_mb_per_s_as_mib_per_s():
    old = {"sweep": [{"format": "jsonl", "mb_per_s": 12.5}], "cpu_count": 4}
    assert analysis.sweep_table(old).mib_per_s.tolist() == [12.5]
    assert analysis.usable_cpus(old) == 4


def test_headline_metric_helpers():
    rows = [
        {
            "format": "memmap",
            "num_workers": 0,
            "persistent_workers": False,
            "cache": "warm",
            "samples_per_s": 900.0,
        },
        {
            "format": "json_files",
            "num_workers": 0,
            "persistent_workers": False,
            "cache": "warm",
            "samples_per_s": 300.0,
        },
        {
            "format": "json_files",
            "num_workers": 2,
            "persistent_workers": False,
            "cache": "warm",
            "samples_per_s": 600.0,
        },
        {
            "format": "memmap",
            "num_workers": 0,
            "persistent_workers": False,
            "cache": "cold",
            "samples_per_s": 10.0,
        },
    ]
    assert analysis.memmap_over_json_files_throughput(rows) == pytest.approx(3.0)
    assert analysis.memmap_over_json_files_throughput(rows[:1]) is None
    stall = [
        {"loader": "in-memory", "compute": "real compute", "stall_fraction": 0.9},
        {"loader": "tar", "compute": "real compute", "stall_fraction": 0.2},
        {"loader": "jsonl", "compute": "real compute", "stall_fraction": 0.1},
        {"loader": "jsonl", "compute": "emulated compute", "stall_fraction": 0.7},
    ]
    assert analysis.worst_stall_fraction_real(stall) == pytest.approx(0.2)
    assert analysis.worst_stall_fraction_real(stall[:1]) is None


@pytest.mark.parametrize(
    "name,value,match",
    [
        ("formats", ["csv"], "formats"),
        ("formats", [], "formats"),
        ("n_samples", 0, "n_samples"),
        ("epochs", 1, "epochs"),
        ("num_workers", [-1], "num_workers"),
        ("num_workers", [], "num_workers"),
        ("scratch_dir", "results/x", "scratch_dir.*results"),
        ("length_sigma", 0, "length_sigma"),
        ("stall_preset", "gpt5", "stall_preset"),
        ("cold", "yes", "cold"),
        ("checkpoint_every", -1, "checkpoint_every"),
        ("stall_emulated_step_s", -0.1, "stall_emulated_step_s"),
        ("device", "tpu", "device"),
    ],
)
def test_params_refuse_bad_values(name, value, match):
    with pytest.raises(ParameterError, match=match):
        Params.from_dict({name: value}).prepared()


def test_params_refuse_unknown_and_profiles_validate():
    import yaml

    from conftest import ROOT

    with pytest.raises(ParameterError, match="unknown parameters: n_sample"):
        Params.from_dict({"n_sample": 3})
    for path in sorted((ROOT / "studies" / "dataloader").glob("*.yaml")):
        Params.from_dict(yaml.safe_load(path.read_text()))


def test_smoke_notebook(run_cli, tmp_path):
    proc = run_cli("run", "dataloader", "--profile", "smoke", "--results-root", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((tmp_path / "testbox" / "dataloader" / "metrics.json").read_text())
    assert metrics["all_epochs_intact"] is True
    assert metrics["memmap_over_json_files_throughput"] > 0
    assert 0 <= metrics["worst_stall_fraction_real"] <= 1
    assert metrics["usable_cpus"] == len(os.sched_getaffinity(0))
    assert {c["id"] for c in metrics["claims"]} >= {"B11", "B2"}
