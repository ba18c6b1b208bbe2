"""Dataloader formats: round trips at several worker counts, corrupt inputs, page-cache eviction."""
import json
import os

import pytest

from mfulab import data
from mfulab.config import ParameterError


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    samples = data.synthetic_corpus(n_samples=120, mean_bytes=200, length_sigma=0.8, seed=1)
    for fmt in data.FORMATS:
        data.write_format(fmt, samples, root, shard_samples=25)
    return root, samples, data.corpus_checksum(samples)


def test_corpus_is_deterministic():
    a = data.synthetic_corpus(n_samples=50, mean_bytes=300, length_sigma=0.5, seed=7)
    b = data.synthetic_corpus(n_samples=50, mean_bytes=300, length_sigma=0.5, seed=7)
    assert a == b and len({s["key"] for s in a}) == 50
    assert data.tokenize("hé").tolist() == [104, 195, 169]  # byte-level


@pytest.mark.parametrize("fmt", data.FORMATS)
@pytest.mark.parametrize("workers", [0, 2])
def test_round_trip(corpus, fmt, workers):
    root, _, expected = corpus
    loader = data.make_loader(fmt, root, batch_size=16, seq_len=64, num_workers=workers, prefetch_factor=2,
                              persistent=False, pin_memory=False)
    epoch = data.run_epochs(loader, 1, expected)[0]
    assert epoch["intact"] and epoch["samples"] == 120


def test_malformed_json_names_the_file(corpus, tmp_path):
    root, samples, _ = corpus
    data.write_format("json_files", samples[:5], tmp_path, shard_samples=5)
    bad = sorted((tmp_path / "json_files").iterdir())[2]
    bad.write_text('{"key": "00000002", "text": ')
    ds = data.JsonFiles(tmp_path)
    with pytest.raises(data.DataError, match=bad.name):
        ds[2]


def test_missing_file_names_the_file(tmp_path):
    samples = data.synthetic_corpus(n_samples=5, mean_bytes=100, length_sigma=0.5, seed=0)
    data.write_format("json_files", samples, tmp_path, shard_samples=5)
    ds = data.JsonFiles(tmp_path)
    gone = ds.files[1]
    os.remove(gone)
    with pytest.raises(data.DataError, match="missing"):
        ds[1]
    with pytest.raises(data.DataError, match="jsonl"):
        data.Jsonl(tmp_path)


def test_malformed_jsonl_line_names_line_and_offset(tmp_path):
    samples = data.synthetic_corpus(n_samples=4, mean_bytes=100, length_sigma=0.5, seed=0)
    data.write_format("jsonl", samples, tmp_path, shard_samples=4)
    path = tmp_path / "jsonl" / "data.jsonl"
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:-5]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(data.DataError, match="line 3 .byte offset"):
        data.Jsonl(tmp_path)[2]


def test_truncated_tar_shard_names_the_shard(tmp_path):
    samples = data.synthetic_corpus(n_samples=60, mean_bytes=300, length_sigma=0.5, seed=0)
    data.write_format("tar", samples, tmp_path, shard_samples=30)
    shard = sorted((tmp_path / "tar").iterdir())[1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2 + 7])
    with pytest.raises(data.DataError, match=shard.name):
        list(data.TarShards(tmp_path))


def test_truncated_memmap_and_corrupt_parquet(tmp_path):
    samples = data.synthetic_corpus(n_samples=20, mean_bytes=100, length_sigma=0.5, seed=0)
    data.write_format("memmap", samples, tmp_path, shard_samples=10)
    data.write_format("parquet", samples, tmp_path, shard_samples=10)
    tokens = tmp_path / "memmap" / "tokens.bin"
    tokens.write_bytes(tokens.read_bytes()[:100])
    with pytest.raises(data.DataError, match="truncated"):
        data.Memmap(tmp_path)
    pq = tmp_path / "parquet" / "data.parquet"
    pq.write_bytes(b"PAR1 not really parquet")
    with pytest.raises(data.DataError, match="data.parquet"):
        data.ParquetRowGroups(tmp_path)


def test_evict_takes_effect(tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(os.urandom(4 << 20))
    with open(path, "rb") as f:
        f.read()
    assert data.resident_fraction(path) > 0.5
    data.evict([path])
    assert data.resident_fraction(path) < 0.2


def test_free_space_check(tmp_path):
    with pytest.raises(ParameterError, match="free"):
        data.check_free_space(tmp_path, 1 << 60)


def test_validate():
    import yaml

    from conftest import ROOT

    params = yaml.safe_load((ROOT / "studies" / "dataloader" / "smoke.yaml").read_text())
    for name, value, match in (("formats", ["csv"], "formats"), ("n_samples", 0, "n_samples"),
                               ("epochs", 1, "epochs"), ("num_workers", [-1], "num_workers"),
                               ("scratch_dir", "results/x", "results")):
        with pytest.raises(ParameterError, match=match):
            data.validate({**params, name: value})


def test_smoke_notebook(run_cli, tmp_path):
    proc = run_cli("run", "dataloader", "--profile", "smoke", "--results-root", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((tmp_path / "testbox" / "dataloader" / "metrics.json").read_text())
    assert metrics["all_epochs_intact"]
    assert {c["id"] for c in metrics["claims"]} >= {"B11", "B2"}
