"""Where things are: the repository root, a study's profiles, and the library files a study's
results depend on (its input hash for incremental runs).

A study's library stamp is its own package plus the transitive closure of the ``mfulab`` modules
it and its notebook import, read from the source (function-level imports included), plus
``analytic/devices.yaml`` and its own ``study.yaml``: a change to a module a study never imports,
or a new study, leaves its results up to date.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from mfulab import results
from mfulab.errors import ParameterError

# glibc's allocator dominates eager CPU timings through page faults; benchmark processes keep
# freed memory mapped. Set before a process starts (glibc reads it once): the runner exports it
# to the kernel, and ``measure`` re-executes itself with it (cli).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "68719476736"}


def repo_root() -> Path:
    """The repository holding ``notebooks/`` and ``studies/`` (``MFULAB_ROOT`` overrides)."""
    env = os.environ.get("MFULAB_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parents[2]
    return here if (here / "studies").is_dir() else Path.cwd()


def study_declaration(study_id: str) -> dict:
    """``studies/<id>/study.yaml`` read as plain data (the registry types it); {} for no study."""
    path = Path(__file__).resolve().parent / "studies" / study_id / "study.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def profiles(study: str, root: Path | None = None) -> list[str]:
    """The profiles of a study: its ``studies/<id>/*.yaml`` except the data files it declares."""
    root = root or repo_root()
    data = set(study_declaration(study).get("data_files") or ())
    return sorted(p.stem for p in (root / "studies" / study).glob("*.yaml") if p.name not in data)


def parse_overrides(pairs) -> dict:
    """``[["seq_len", "2048"], ...]`` → ``{"seq_len": 2048}`` (values read as YAML, like papermill's -p)."""
    return {name: yaml.safe_load(value) for name, value in (pairs or [])}


def read_profile(path) -> dict:
    """A profile file: the parameters that differ from the study's defaults."""
    path = Path(path)
    if not path.exists():
        raise ParameterError(f"parameter file {path} does not exist")
    values = yaml.safe_load(path.read_text()) or {}
    if not isinstance(values, dict):
        raise ParameterError(f"{path} must hold a mapping of parameter names to values")
    return values


def _module_file(lib: Path, dotted: str) -> Path | None:
    """The file of ``mfulab.<dotted>`` (a module or a package's ``__init__``), or None."""
    base = lib.joinpath(*dotted.split(".")) if dotted else lib
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _imported_modules(lib: Path, path: Path) -> set[Path]:
    """The ``mfulab`` modules one file imports, at any level (function-level imports included),
    read from its source: ``import mfulab.x``, ``from mfulab.x import y``, ``from ..x import y``
    (and ``y`` itself where it is a module)."""
    import ast

    tree = ast.parse(path.read_text(), filename=str(path))
    if path.is_relative_to(lib):
        package = list(path.relative_to(lib).parent.parts)
    else:
        package = None  # a notebook: only absolute imports
    found: set[Path] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [
                a.name.removeprefix("mfulab").lstrip(".")
                for a in node.names
                if a.name.split(".")[0] == "mfulab"
            ]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if package is None:
                    continue
                parts = package[: len(package) - (node.level - 1)] if node.level > 1 else list(package)
                target = ".".join([*parts, *(node.module.split(".") if node.module else [])])
            elif node.module and node.module.split(".")[0] == "mfulab":
                target = node.module.removeprefix("mfulab").lstrip(".")
            else:
                continue
            names = [target] + [f"{target}.{a.name}".lstrip(".") for a in node.names]
        for name in names:
            file = _module_file(lib, name)
            if file is not None:
                found.add(file)
    return found


def library_files(study_id: str | None = None) -> list[Path]:
    """The library code a study's results depend on: its own package, its notebook's imports, and
    the transitive closure of the ``mfulab`` modules they import (read from the source,
    function-level imports included), plus ``analytic/devices.yaml`` and its own ``study.yaml``.
    A change to a module the study never imports, or a new study, does not make its results
    stale; a study that reads every study's results (the comparison) also depends on every
    ``study.yaml``. Without a study: the whole library."""
    lib = Path(__file__).resolve().parent
    if study_id is None:
        return sorted([*lib.rglob("*.py"), *lib.rglob("*.yaml")])
    package = lib / "studies" / study_id
    declaration = study_declaration(study_id)
    seeds = [*package.rglob("*.py")]
    if declaration.get("notebook"):  # the notebook's own imports (the notebook is hashed on its own)
        seeds.append(repo_root() / "notebooks" / declaration["notebook"])
    todo = [p for p in seeds if p.is_file()]
    seen: set[Path] = set(todo)
    while todo:
        for module in _imported_modules(lib, todo.pop()):
            if module not in seen:
                seen.add(module)
                todo.append(module)
    in_lib = {p for p in seen if p.is_relative_to(lib)}
    files = {*in_lib, lib / "analytic" / "devices.yaml", *package.rglob("*.yaml")}
    if declaration.get("reads_results"):  # the comparison reads every declaration
        files |= set((lib / "studies").glob("*/study.yaml"))
    return sorted(files)


def library_sha256(study_id: str | None = None) -> str:
    """The digest of :func:`library_files`, where a ``study.yaml`` counts without its time
    budgets (``budget_s``): a budget says how long a run may take, not what it measures, so
    changing one leaves every result up to date."""
    return results.sha256_files(library_files(study_id), read=_stamped_bytes)


def _stamped_bytes(path: Path) -> bytes:
    """A file's bytes as the stamp reads them: a ``study.yaml`` as its declaration less
    ``budget_s`` (canonical JSON, so comments and layout do not count either)."""
    if path.name != "study.yaml":
        return path.read_bytes()
    declaration = {k: v for k, v in (yaml.safe_load(path.read_text()) or {}).items() if k != "budget_s"}
    return json.dumps(declaration, sort_keys=True).encode()
