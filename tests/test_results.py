import json

import pytest

from mfulab import results


def test_atomic_dir_replaces_only_on_success(tmp_path):
    final = tmp_path / "m" / "study"
    final.mkdir(parents=True)
    (final / "old.txt").write_text("old")
    with pytest.raises(RuntimeError):
        with results.atomic_dir(final) as tmp:
            (tmp / "half.txt").write_text("half")
            raise RuntimeError("boom")
    assert (final / "old.txt").read_text() == "old" and not (final / "half.txt").exists()
    assert [p.name for p in final.parent.iterdir()] == ["study"]  # no temporary folder left
    with results.atomic_dir(final) as tmp:
        (tmp / "new.txt").write_text("new")
    assert (final / "new.txt").exists() and not (final / "old.txt").exists()
    assert [p.name for p in final.parent.iterdir()] == ["study"]


def test_write_json_handles_numpy_and_nan(tmp_path):
    import numpy as np

    path = results.write_json(
        tmp_path / "a.json", {"x": np.float64(1.5), "y": float("nan"), "z": np.arange(3)}
    )
    assert json.loads(path.read_text()) == {"x": 1.5, "y": None, "z": [0, 1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_metrics_merge_and_load_all(tmp_path):
    out = tmp_path / "cpu-2c" / "mfu"
    results.save_metrics(out, {"a_s": 1})
    results.save_metrics(out, {"b_s": 2})
    assert results.load_all(tmp_path, "mfu") == {"cpu-2c": {"a_s": 1, "b_s": 2}}


def test_load_measurements_explains_a_wrong_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="mfulab measure"):
        results.load_measurements(tmp_path)
