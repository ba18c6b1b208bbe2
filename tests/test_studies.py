"""The study registry and the study layer's rules: every study is one package with typed
parameters, a notebook that runs with its defaults, profiles that hold only differences,
and nothing outside its package lists it."""

import ast
import dataclasses
import re
from pathlib import Path

import pytest
import yaml

# a bare GPU image has no jupytext: skip this module there instead of failing collection
jupytext = pytest.importorskip("jupytext", reason="the notebook checks need jupytext, not installed")

from mfulab import runner  # noqa: E402
from mfulab.config import ParameterError  # noqa: E402
from mfulab.params import StudyParams  # noqa: E402
from mfulab.studies import REGISTRY, get  # noqa: E402

from conftest import ROOT  # noqa: E402

LIB = ROOT / "lib" / "mfulab"
STUDIES = list(REGISTRY)


def test_registry_lists_every_study_package_in_course_order():
    packages = sorted(p.name for p in (LIB / "studies").iterdir() if (p / "study.yaml").exists())
    assert packages == sorted(p.name for p in (LIB / "studies").iterdir() if (p / "__init__.py").exists())
    assert sorted(REGISTRY) == packages
    numbers = [s.number for s in REGISTRY.values()]
    assert len(set(numbers)) == len(numbers)
    assert list(REGISTRY)[-1] == "compare"  # it reads the others: last
    with pytest.raises(ParameterError, match="valid studies"):
        get("nosuch")


@pytest.mark.parametrize("study_id", STUDIES)
def test_study_declaration_is_complete(study_id):
    study = REGISTRY[study_id]
    assert (ROOT / "notebooks" / study.notebook).exists()
    assert study.notebook.startswith(f"{study.number:02d}_")
    assert issubclass(study.params, StudyParams) and dataclasses.is_dataclass(study.params)
    assert study.params.__dataclass_params__.frozen
    for field in study.params.schema():
        assert field["meaning"], f"{study_id}.{field['name']} has no meaning"
    keys = [m.key for m in study.metrics]
    assert len(keys) == len(set(keys))
    if study.measure:
        assert callable(study.measure_fn())


@pytest.mark.parametrize("study_id", STUDIES)
def test_profiles_validate_and_hold_only_differences(study_id):
    study = REGISTRY[study_id]
    defaults = study.params().to_dict()
    names = runner.profiles(study_id)
    assert names, f"{study_id} has no profile"
    for name in names:
        values = yaml.safe_load((ROOT / "studies" / study_id / f"{name}.yaml").read_text()) or {}
        study.params.from_dict(values)
        same = [k for k, v in values.items() if defaults[k] == v]
        assert same in ([], ["device"]), f"studies/{study_id}/{name}.yaml repeats defaults: {same}"


def _parameters_cell(notebook: Path) -> str:
    nb = jupytext.read(notebook)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{notebook.name} needs exactly one parameters cell"
    return cells[0].source


@pytest.mark.parametrize("study_id", STUDIES)
def test_notebook_parameters_run_without_injection(study_id):
    """Opened by hand (no papermill), the parameters cell gives the defaults, and the
    study's parameters build from them; the cell holds plain literals only."""
    study = REGISTRY[study_id]
    source = _parameters_cell(ROOT / "notebooks" / study.notebook)
    namespace: dict = {}
    exec(compile(source, study.notebook, "exec"), namespace)
    assert namespace["params"] == {} and namespace["out_dir"] == "" and namespace["from_dir"] == ""
    for node in ast.parse(source).body:
        assert isinstance(node, ast.Assign) and isinstance(node.value, (ast.Constant, ast.Dict)), (
            study.notebook
        )
    p = study.params.from_dict(namespace["params"])
    assert p == study.params()


@pytest.mark.parametrize("study_id", STUDIES)
def test_bad_parameters_name_the_parameter(study_id):
    study = REGISTRY[study_id]
    with pytest.raises(ParameterError, match="unknown parameters: no_such_knob"):
        study.params.from_dict({"no_such_knob": 1})
    first = study.params.schema()[0]
    with pytest.raises(ParameterError, match=first["name"]):
        study.params.from_dict({first["name"]: object()})


def test_typed_parameters_check_types():
    mfu = get("mfu").params
    with pytest.raises(ParameterError, match="steps must be a integer"):
        mfu.from_dict({"steps": True})
    with pytest.raises(ParameterError, match="convention_seq_lens"):
        mfu.from_dict({"convention_seq_lens": [256, "x"]})
    assert mfu.from_dict({"convention_seq_lens": [64]}).convention_seq_lens == (64,)
    assert mfu.from_dict({"warmup_steps": 0}).warmup_steps == 0


def test_nothing_outside_a_study_package_names_a_study():
    """Adding a study touches only its package, notebook and YAML files: no core module
    lists study ids or imports a study package (the registry discovers them)."""
    from mfulab.cli import _parser

    ids = [s for s in REGISTRY if s != "compare"]
    # `python -m mfulab predict` is a command of the library (predict.py), named like the study
    # that validates it: the command line may name its own commands
    commands = set(next(a for a in _parser()._actions if a.dest == "command").choices)
    for path in LIB.glob("*.py"):
        text = path.read_text()
        assert "mfulab.studies." not in text and "from .studies." not in text, path.name
        for study_id in ids:
            if path.name == "cli.py" and study_id in commands:
                continue
            assert not re.search(rf"[\"']{study_id}[\"']", text), f"{path.name} names study {study_id!r}"


def test_no_study_imports_another_study():
    for study in REGISTRY.values():
        for path in (LIB / "studies" / study.id).glob("*.py"):
            for other in REGISTRY:
                if other != study.id:
                    assert (
                        f"studies.{other}" not in path.read_text() and f"..{other}" not in path.read_text()
                    ), f"{path} imports study {other}"


def test_library_files_stay_small():
    for path in LIB.rglob("*.py"):
        assert len(path.read_text().splitlines()) <= 420, f"{path.relative_to(ROOT)} is over ~400 lines"


def test_readme_course_table_is_the_registry():
    """The README's course table is generated (make readme) and in sync with the registry."""
    from mfulab import cli

    assert cli.readme(check=True) == 0, "README.md's course table is stale: run 'make readme'"
    readme = (ROOT / "README.md").read_text()
    for study in REGISTRY.values():
        assert re.search(
            rf"\| {study.number:02d} \| `{study.id}` \| \[notebooks/{re.escape(study.notebook)}\]", readme
        ), f"README's course table lacks {study.id}"


def test_repository_stands_alone():
    """Nothing tracked points outside the repository to background material."""
    import subprocess

    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    for name in files:
        path = ROOT / name
        if path.suffix in (".png", ".gz", ".parquet") or not path.is_file():
            continue
        text = path.read_text(errors="ignore")
        for word in ("shared" + "/", "seeds" + "/"):
            assert word not in text, f"{name} mentions {word}"


def _module_level_imports(path: Path, package: str) -> set[str]:
    """Modules of mfulab that ``path`` imports at module level (function-level imports are
    deferred on purpose and cannot form an import-time cycle)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("mfulab"):
                found.add(target)
                found.update(f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("mfulab"))
    return found


def test_no_import_cycles():
    modules = {}
    for path in LIB.rglob("*.py"):
        rel = path.relative_to(LIB.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        package = name if rel.name == "__init__" else ".".join(rel.parts[:-1])
        modules[name] = path, package
    graph = {
        name: {m for m in _module_level_imports(path, package) if m in modules and m != name}
        for name, (path, package) in modules.items()
    }
    state: dict[str, int] = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " → ".join(stack + [node, nxt]))
            if nxt not in state:
                visit(nxt, stack + [node])
        state[node] = 2

    for name in graph:
        if name not in state:
            visit(name, [])


def test_committed_notebooks_print_no_scratch_paths_or_profiler_noise():
    """Executed notebooks under results/ show the course, not the runner's temporary folders,
    a return value's path, the C++ profiler's USDT lines or a progress bar's residue."""
    import json

    for path in sorted((ROOT / "results").glob("*/*/*.ipynb")):
        nb = json.loads(path.read_text())
        injected = json.dumps(nb["metadata"].get("papermill", {}))  # parameters, input and output paths
        assert ".tmp-" not in injected, f"{path.relative_to(ROOT)}: a scratch path in its papermill metadata"
        for cell in nb["cells"]:
            assert ".tmp-" not in "".join(cell["source"]), f"{path.relative_to(ROOT)}: a scratch path"
            for output in cell.get("outputs", []):
                text = "".join(output.get("text", [])) + "".join(output.get("data", {}).get("text/plain", []))
                for bad in ("PosixPath(", ".tmp-", "USDT:", "it/s]", "s/it]"):
                    assert bad not in text, f"{path.relative_to(ROOT)} prints {bad!r}"
