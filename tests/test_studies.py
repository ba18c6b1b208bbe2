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

from mfulab import paths  # noqa: E402
from mfulab.errors import ParameterError  # noqa: E402
from mfulab.studykit.params import StudyParams  # noqa: E402
from mfulab.studykit.registry import REGISTRY, get  # noqa: E402

from conftest import ROOT  # noqa: E402

LIB = ROOT / "lib" / "mfulab"
STUDIES = list(REGISTRY)


def test_registry_lists_every_study_package_in_course_order():
    packages = sorted(p.name for p in (LIB / "studies").iterdir() if (p / "study.yaml").exists())
    assert packages == sorted(p.name for p in (LIB / "studies").iterdir() if (p / "__init__.py").exists())
    assert sorted(REGISTRY) == packages
    numbers = [s.number for s in REGISTRY.values()]
    assert sorted(numbers) == list(range(1, len(numbers) + 1)), "the chapters are numbered 1..N without gaps"
    own = [s.number for s in REGISTRY.values() if not s.reads_results]
    assert own == sorted(own)  # course order is the number order; the comparison comes last
    for study in REGISTRY.values():
        assert study.notebook.startswith(f"{study.number:02d}_"), study.notebook
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
    names = paths.profiles(study_id)
    assert names, f"{study_id} has no profile"
    for name in names:
        values = yaml.safe_load((ROOT / "studies" / study_id / f"{name}.yaml").read_text()) or {}
        study.params.from_dict(values)
        same = [k for k, v in values.items() if defaults[k] == v]
        assert same in ([], ["device"]), f"studies/{study_id}/{name}.yaml repeats defaults: {same}"


@pytest.mark.parametrize("study_id", STUDIES)
def test_every_profile_a_course_or_a_machine_runs_declares_its_time_budget(study_id):
    """Each profile but smoke (the tests' own) has a budget in study.yaml, and every budget
    names a profile the study has: a gpu run's time is recorded against it."""
    budgets, names = REGISTRY[study_id].budget_s, set(paths.profiles(study_id))
    assert set(budgets) <= names, f"{study_id}: budgets for missing profiles {set(budgets) - names}"
    assert names - {"smoke"} <= set(budgets), f"{study_id}: no budget for {names - {'smoke'} - set(budgets)}"


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
    from mfulab.run.cli import _parser

    ids = [s for s in REGISTRY if s != "compare"]
    # `python -m mfulab predict` is a command of the library (run/predict_cli.py), named like the study
    # that validates it: the command line may name its own commands
    commands = set(next(a for a in _parser()._actions if a.dest == "command").choices)
    for path in (p for p in LIB.rglob("*.py") if not p.is_relative_to(LIB / "studies")):
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
    from mfulab.run import cli

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


# The layers of the library, bottom to top (docs/architecture.md): a module imports only modules
# of its own floor or below. The ground floor is the top-level modules (errors, units, paths,
# results); ``__main__`` is the entry point above everything.
FLOORS = ("", "analytic", "measure", "studykit", "studies", "site", "run")


def _module_name(path: Path) -> str:
    rel = path.relative_to(LIB.parent).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def _floor(module: str) -> str:
    """The floor of a module or of a floor's package itself (``mfulab.run`` is on ``run``)."""
    parts = module.split(".")[1:]
    return parts[0] if parts and parts[0] in FLOORS else ""


def _study_of(module: str) -> str | None:
    """The study a module belongs to (``mfulab.studies.<id>[.x]``), None outside ``studies/``."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "studies" else None


def _imports_of_source(code: str, modules: set[str], where: str = "<source>") -> set[str]:
    """Every module of ``modules`` the source ``code`` imports, at any level (function-level
    imports included): the graph a reader has to hold, not only the one Python sees at import
    time. ``from a import b`` counts ``a`` and, where it is a module, ``a.b``."""
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom):
            assert not node.level, f"{where}:{node.lineno} uses a relative import"
            if node.module and node.module.split(".")[0] == "mfulab":
                found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "mfulab"}
    return found & modules


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The ``mfulab`` modules the file ``path`` imports (:func:`_imports_of_source`), itself left out."""
    found = _imports_of_source(path.read_text(), modules, str(path.relative_to(ROOT)))
    return {m for m in found if m != _module_name(path)}


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in LIB.rglob("*.py")}
    return {name: _imports(path, set(files)) for name, path in files.items()}


def test_a_folder_imports_only_folders_below_it():
    """analytic < measure < studykit < studies < site < run over the ground floor: nothing below
    ``run/`` imports ``run/``, and no study imports another."""
    for module, targets in _graph().items():
        if module == "mfulab.__main__":
            continue
        for target in targets:
            if target in ("mfulab", "mfulab.__main__"):
                continue
            here, there = FLOORS.index(_floor(module)), FLOORS.index(_floor(target))
            assert there <= here, f"{module} (floor {_floor(module) or 'ground'}) imports {target} above it"
            if _study_of(module) and _study_of(target):
                assert _study_of(target) == _study_of(module), f"{module} imports study module {target}"


def test_the_floor_rules_see_package_imports():
    """The graph reads ``from mfulab import run`` and ``from mfulab.studies import x``: a lower
    floor importing ``run/`` that way, or a study importing another that way, is caught."""
    assert _floor("mfulab.run") == "run" and _floor("mfulab.run.cli") == "run"
    assert _floor("mfulab.errors") == "" and _floor("mfulab") == ""
    assert _study_of("mfulab.studies.mfu") == "mfu" and _study_of("mfulab.studies") is None
    code = "from mfulab import run\nfrom mfulab.studies import overlap\n"
    found = _imports_of_source(code, {"mfulab.run", "mfulab.studies.overlap", "mfulab"})
    assert found == {"mfulab.run", "mfulab.studies.overlap", "mfulab"}


def test_a_notebook_imports_its_own_study_and_nothing_of_run():
    """A chapter's notebook (``notebooks/NN_*.py``) sits on top of ``studykit`` and its own study:
    it imports no other study's modules and nothing from ``run/`` (a runner change restamps no
    study), function-level imports included."""
    modules = {_module_name(p) for p in LIB.rglob("*.py")}
    for s in REGISTRY.values():
        path = ROOT / "notebooks" / s.notebook
        for target in _imports_of_source(path.read_text(), modules):
            assert _floor(target) != "run", f"{s.notebook} imports {target}"
            assert _study_of(target) in (None, s.id), f"{s.notebook} imports another study's {target}"


def test_no_import_cycles():
    """No cycle in the import graph, function-level imports included."""
    graph = _graph()
    state: dict[str, int] = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if nxt == "mfulab":  # the package's own __init__ imports nothing
                continue
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " → ".join(stack + [node, nxt]))
            if nxt not in state:
                visit(nxt, stack + [node])
        state[node] = 2

    for name in graph:
        if name not in state:
            visit(name, [])


def test_analytic_imports_neither_torch_nor_pandas_at_module_level():
    """The analytic models are numbers only: importing one never loads torch or pandas."""
    for path in (LIB / "analytic").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in ("torch", "pandas"), (
                    f"{path.name} imports {name} at module level"
                )


def test_every_notebook_shows_the_tables_its_outcome_built():
    """A study's notebook calls ``claims.outcome`` once, saves and shows ``outcome.tables``, and
    builds no table of its own (``results.save_table`` only in the comparison, which reads other
    studies' results); ``outcome`` returns an ``Outcome`` whose claims and metrics ``make
    stability`` reads, so the verdicts shown are the ones whose stability is measured."""
    import inspect

    from mfulab.studykit.outcome import Outcome

    for study in REGISTRY.values():
        text = (ROOT / "notebooks" / study.notebook).read_text()
        if study.reads_results:
            continue
        assert text.count("claims.outcome(records, p)") == 1, study.id
        assert "o.save_tables(out)" in text and "results.save_table(" not in text, study.id
        assert "o.tables[" in text or "= o.tables" in text, study.id
        hint = inspect.signature(study.outcome_fn()).return_annotation
        assert hint in (Outcome, "Outcome"), f"{study.id}: outcome returns {hint}"


def _study_calls(tree: ast.AST, study_id: str) -> set[tuple[str, str]]:
    """The functions of a study's own modules a source calls, as (module, name):
    ``analysis.f(...)`` after ``from mfulab.studies.<id> import analysis``, or ``f(...)`` after
    ``from mfulab.studies.<id>.analysis import f``."""
    package = f"mfulab.studies.{study_id}"
    modules, names = {}, {}  # local name -> module stem; local name -> (module stem, name)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == package:
            modules |= {a.asname or a.name: a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + "."):
            stem = node.module.rsplit(".", 1)[1]
            names |= {a.asname or a.name: (stem, a.name) for a in node.names}
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in modules:
                out.add((modules[f.value.id], f.attr))
            elif isinstance(f, ast.Name) and f.id in names:
                out.add(names[f.id])
    return out


def test_figures_and_notebooks_never_recompute_what_outcome_built():
    """A study's figures and notebook draw ``outcome``'s tables and quote its values: no
    function of the study's own modules that ``claims.py`` calls to build a table, a value or
    a claim is called again by ``figures.py`` or by the notebook (the numbers a reader sees
    and the ones the verdicts read come from one computation)."""
    for study in REGISTRY.values():
        package = LIB / "studies" / study.id
        if not (package / "claims.py").exists():
            continue
        built = _study_calls(ast.parse((package / "claims.py").read_text()), study.id)
        assert built, f"{study.id}: claims.py calls nothing of its study (the test would see nothing)"
        for where in (package / "figures.py", ROOT / "notebooks" / study.notebook):
            if where.exists():
                tree = ast.parse(where.read_text())
                own = (
                    {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
                    if where.stem == "figures"
                    else set()
                )
                again = {f"{m}.{n}" for m, n in _study_calls(tree, study.id) & built if n not in own}
                assert not again, f"{where.name} recomputes {sorted(again)}: read outcome's tables/values"


def test_mechanisms_two_studies_share_live_in_the_core():
    """What more than one study runs is written once, below the studies: a timed forward +
    backward under autocast (``measure.train.forward_backward``, ``train_step``), the FIFO
    channel that chunked and bucketed communication queue on (``analytic.comm.fifo_channel``)
    and the generic interval verdict rules (``studykit.verdicts``). A study closure that runs
    autocast and backward itself, a study function named for a FIFO schedule, or a generic
    ``verdict_from_*`` / ``verdict_in_*`` rule defined in a study fails here."""
    generic_rules = ("verdict_from_", "verdict_in_", "verdict_below", "verdict_under_")
    for path in sorted((LIB / "studies").rglob("*.py")):
        where = path.relative_to(LIB)
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef):
                continue
            assert not fn.name.startswith(generic_rules), f"{where}: {fn.name} belongs in studykit.verdicts"
            assert "fifo" not in fn.name.lower(), f"{where}: {fn.name}: use analytic.comm.fifo_channel"
            for inner in ast.walk(fn):
                if inner is fn or not isinstance(inner, ast.FunctionDef):
                    continue
                called = {
                    c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", None)
                    for c in ast.walk(inner)
                    if isinstance(c, ast.Call)
                }
                assert not {"autocast", "backward"} <= called, (
                    f"{where}: {fn.name}.{inner.name} times its own forward + backward; "
                    "use measure.train.forward_backward or train_step"
                )
    for study in ("overlap", "buckets"):  # both queue calls on one channel
        text = "".join(p.read_text() for p in (LIB / "studies" / study).glob("*.py"))
        assert "comm.fifo_channel(" in text, study


def test_every_study_declares_its_claims_entry_point():
    """The registry resolves nothing by convention: a study with a claims module declares
    ``outcome: "claims:outcome"``; one with node checks declares them; analysis never imports
    claims (claims are composed beside the tables, not below them)."""
    for study in REGISTRY.values():
        package = LIB / "studies" / study.id
        if (package / "claims.py").exists():
            assert study.outcome == f"mfulab.studies.{study.id}.claims:outcome", study.id
            assert callable(study.outcome_fn())
        else:
            assert study.reads_results and not study.outcome, f"{study.id} has no claims.py"
        if (package / "node_checks.py").exists():
            assert callable(study.node_checks_fn()), study.id
        if (package / "analysis.py").exists():
            assert f"mfulab.studies.{study.id}.claims" not in _imports(
                package / "analysis.py", set(_graph())
            ), f"{study.id}: analysis imports claims"


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


def test_the_readme_states_each_gpu_and_node_budget_as_study_yaml_declares_it():
    readme = " ".join((ROOT / "README.md").read_text().split())
    para = readme[readme.index("declares a time budget in its study's") :][:900]
    for study in REGISTRY.values():
        for profile in ("gpu", "node"):
            budget = study.budget_s.get(profile)
            if (
                budget
                and REGISTRY[study.id]
                .params.from_dict(
                    yaml.safe_load((ROOT / "studies" / study.id / f"{profile}.yaml").read_text()) or {}
                )
                .to_dict()
                .get("device", "cuda")
                != "cpu"
            ):
                assert f"{study.id} {budget:g} s" in para, (study.id, profile, budget)


def test_b2_has_one_presence_floor_across_the_course():
    """B2 is judged in chapters 01, 06 and 07 on whether a category of step time is present:
    one floor for the same claim id, so a reader can set the three rows side by side."""
    from mfulab.studies.anatomy.params import Params as AnatomyParams
    from mfulab.studies.dataloader.params import Params as DataloaderParams
    from mfulab.studies.mfu.params import Params as MfuParams
    from mfulab.studykit import verdicts

    floors = {
        "mfu": MfuParams().b2_present_share,
        "dataloader": DataloaderParams().nonzero_share,
        "anatomy": AnatomyParams().b2_present_share,
    }
    assert set(floors.values()) == {verdicts.B2_PRESENT_SHARE}, floors
