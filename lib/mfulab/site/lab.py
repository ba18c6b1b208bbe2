"""JupyterLab for the course (``make lab``): the executed notebooks under ``results/`` are
records of a run, so the server opens them read-only and refuses to save over them; re-run a
study with ``make <study>`` instead. The notebooks under ``notebooks/`` open as notebooks
through jupytext, which wraps this contents manager."""

from __future__ import annotations

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from tornado import web

RECORDS = "results"


def is_record(path: str) -> bool:
    """True for a path (relative to the server's root) inside ``results/``."""
    parts = [p for p in path.strip("/").split("/") if p]
    return len(parts) > 1 and parts[0] == RECORDS


class ResultsReadOnlyContentsManager(AsyncLargeFileManager):
    """Files under ``results/`` are served with ``writable: false`` and cannot be saved."""

    async def get(self, path, content=True, type=None, format=None, require_hash=False):
        model = await super().get(path, content=content, type=type, format=format, require_hash=require_hash)
        if is_record(path):
            model["writable"] = False
        return model

    async def save(self, model, path=""):
        if is_record(path):
            raise web.HTTPError(403, f"{path} is an executed record; re-run the study with 'make <study>'")
        return await super().save(model, path)
