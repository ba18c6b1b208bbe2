"""make lab: JupyterLab serves the executed notebooks under results/ read-only and opens the
jupytext notebooks as notebooks with the mfulab kernel."""

import asyncio
import json

import pytest

# a bare GPU image has no Jupyter stack: skip this module there instead of failing collection
web = pytest.importorskip("tornado.web", reason="make lab needs tornado (Jupyter), not installed")
pytest.importorskip("jupyter_server", reason="make lab needs jupyter_server, not installed")

from mfulab.site.lab import ResultsReadOnlyContentsManager, is_record  # noqa: E402

from conftest import ROOT  # noqa: E402


def test_records_are_read_only(tmp_path):
    record = tmp_path / "results" / "cpu-2c" / "mfu"
    record.mkdir(parents=True)
    (record / "metrics.json").write_text("{}")
    manager = ResultsReadOnlyContentsManager(root_dir=str(tmp_path))
    model = asyncio.run(manager.get("results/cpu-2c/mfu/metrics.json", content=False))
    assert model["writable"] is False
    with pytest.raises(web.HTTPError, match="executed record"):
        asyncio.run(
            manager.save({"type": "file", "format": "text", "content": "x"}, "results/cpu-2c/mfu/x.txt")
        )
    saved = asyncio.run(manager.save({"type": "file", "format": "text", "content": "x"}, "scratch.txt"))
    assert saved["writable"] is True and (tmp_path / "scratch.txt").read_text() == "x"
    assert is_record("/results/a/b.ipynb") and not is_record("results") and not is_record("notebooks/x.py")


def test_make_lab_opens_text_notebooks_as_notebooks():
    makefile = (ROOT / "Makefile").read_text()
    assert "mfulab.site.lab.ResultsReadOnlyContentsManager" in makefile
    assert "default_kernel_name=mfulab" in makefile
    viewers = json.loads(makefile.split("printf '%s\\n' '")[1].split("'")[0])
    assert (
        viewers["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]["python"] == "Jupytext Notebook"
    )
