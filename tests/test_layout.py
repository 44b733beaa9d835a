"""The repository's layout as tools see it: static import resolution, the wheel, the import
contracts, and no machine-specific paths.

* jedi (the engine behind most Python editors) resolves every ``refold`` import written in
  refold/ to a file inside refold/ (never to the top-level ``fold``/``storage``/``jobs`` symlinks),
  both from the repository as a project and from an unrelated project using the install;
* the wheel ships the subpackages, ``py.typed`` and the sample data, and only the ``refold``
  package (the top-level symlinks are not packages of their own);
* ``lint-imports`` keeps the contracts in pyproject.toml (the pure core imports neither storage,
  jobs nor the front door; storage imports neither jobs nor the front door; no import cycles), the
  contracts name every front-door module, and they do fail on a violating import;
* no tracked file names a path on one particular machine;
* the reference fold (refold/fold/reference.py) is the tests' oracle: no module of the package
  imports it.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import jedi
import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "refold"
#: The subpackages below the front door; every other module of `refold` is the front door.
LAYERS = ("fold", "storage", "jobs")
#: Copied for builds: everything but what a checkout grows (virtualenv, VCS, build outputs).
_NOT_SOURCE = shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "__pycache__",
                                     ".pytest_cache", ".hypothesis", "demo-store", "*.so")


def _source_copy(dest: Path) -> Path:
    """A copy of the checkout (symlinks kept as symlinks), so builds write nothing into it."""
    shutil.copytree(REPO, dest, symlinks=True, ignore=_NOT_SOURCE)
    return dest


def _optional_native(node: ast.ImportFrom, module_file: Path) -> bool:
    """An import of an optional C extension (``from . import _sealhash`` guarded by ImportError):
    it resolves only where the build compiled it, and its source sits beside the module."""
    return all((module_file.parent / f"{alias.name}.c").is_file() for alias in node.names)


def _refold_imports(path: Path):
    """(line, column after the imported name, text) of every import of refold code in ``path``:
    absolute ``refold.*`` and relative imports, module level and function-local alike."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "refold"):
            if node.level and _optional_native(node, path):
                continue
            source = "." * node.level + (node.module or "")
            for alias in node.names:
                yield alias.lineno, alias.col_offset + len(alias.name), f"from {source} import {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "refold":
                    yield alias.lineno, alias.col_offset + len(alias.name), f"import {alias.name}"


def _inside_package(definitions) -> bool:
    return any(d.module_path is not None and Path(d.module_path).is_relative_to(PACKAGE) for d in definitions)


# -- static tools ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_jedi_resolves_every_refold_import_in_the_package():
    """Each imported name (a module, a class, a function) is found by jedi in a file under
    refold/: what an editor's go-to-definition and completion need."""
    project = jedi.Project(path=REPO)
    seen, unresolved = 0, []
    for module in sorted(PACKAGE.rglob("*.py")):
        script = jedi.Script(module.read_text(), path=module, project=project)
        for line, column, text in _refold_imports(module):
            seen += 1
            found = script.goto(line, column, follow_imports=True)
            if not _inside_package(found):
                where = [str(d.module_path) for d in found] or "nothing"
                unresolved.append(f"{module.relative_to(REPO)}:{line}: {text} -> {where}")
    assert seen > 300  # the walk found the package's imports
    assert not unresolved, "\n".join(unresolved)


def test_jedi_resolves_refold_from_another_project_like_the_interpreter(tmp_path):
    """From a project that only uses refold (an unrelated folder), jedi lands in the same files
    as the interpreter's own import system: the editable install is followed, not guessed."""
    import importlib.util

    code = ("from refold.fold.merge import merge\n"
            "from refold.storage.log.eventlog import EventLog\n"
            "from refold.jobs.project import fold_job\n"
            "from refold.extractors.openai import OpenAIExtractor\n"
            "from refold.memory import Memory\n")
    script = jedi.Script(code, path=tmp_path / "app.py", project=jedi.Project(path=tmp_path))
    for number, line in enumerate(code.splitlines(), start=1):
        module, name = line.removeprefix("from ").split(" import ")
        (found,) = script.goto(number, len(line), follow_imports=True)
        assert (found.name, found.type) == (name, "class" if name[0].isupper() else "function")
        assert Path(found.module_path) == Path(importlib.util.find_spec(module).origin)
        assert "refold" in Path(found.module_path).parent.parts


def test_every_refold_module_is_found_without_the_editable_finder():
    """A plain path search from the repository root (what pyright, jedi and `python -m` in a
    Ray working dir do) finds every refold module imported in refold/, inside refold/."""
    from importlib.machinery import PathFinder

    modules = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module.split(".")[0] == "refold":
                modules.add(node.module)
            elif isinstance(node, ast.Import):
                modules.update(a.name for a in node.names if a.name.split(".")[0] == "refold")
    assert {"refold.fold.events", "refold.storage.log.eventlog", "refold.jobs.config", "refold.extractors"} <= modules
    for name in sorted(modules):
        search, spec = [str(REPO)], None
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            spec = PathFinder.find_spec(".".join(parts[:depth]), search)
            assert spec is not None, f"{name}: {'.'.join(parts[:depth])} is not on the plain path"
            search = list(spec.submodule_search_locations or [])
        assert Path(spec.origin).is_relative_to(PACKAGE), f"{name} -> {spec.origin}"


# -- the wheel -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_wheel_ships_the_subpackages_py_typed_and_data(tmp_path):
    source = _source_copy(tmp_path / "src")
    out = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(out), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = out.glob("refold-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())

    expected = {f"refold/{p.relative_to(PACKAGE).as_posix()}"
                for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    expected |= {f"refold/data/{p.name}" for p in (PACKAGE / "data").glob("*.jsonl")}
    expected |= {"refold/py.typed", "refold/__init__.py", "refold/cli/__init__.py"}
    assert len(expected) > 60 and not expected - names, sorted(expected - names)
    (dist_info,) = {n.split("/")[0] for n in names} - {"refold"}  # no top-level fold/, storage/, jobs/
    assert dist_info.endswith(".dist-info")
    (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["refold"]


# -- import contracts ------------------------------------------------------------------------------

def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    search = [str(root), os.environ.get("PYTHONPATH")]  # `root`'s refold first
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, search))}
    return subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache", "--no-logo"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold():
    done = _lint_imports(REPO)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "3 kept, 0 broken" in done.stdout, done.stdout[-2000:]


def test_no_module_reads_another_class_private_members():
    """ruff's SLF001: code outside a class reaches it through its public, documented surface."""
    done = subprocess.run([str(Path(sys.executable).parent / "ruff"), "check", "--no-cache", "--select", "SLF001",
                           "--output-format", "concise", "refold"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_layers_contract_names_every_package_and_counts_type_only_imports():
    """The layers contract is exhaustive (a new top-level module or package must be placed in a
    layer, or lint-imports fails) and counts imports made only for type checking: a helper that
    names ``Memory`` in an annotation depends on the facade."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert config["exclude_type_checking_imports"] is False
    contracts = {c["id"]: c for c in config["contracts"]}
    layers = contracts["layers"]
    assert layers["type"] == "layers" and layers["exhaustive"] is True and layers["containers"] == ["refold"]
    named = {name.strip() for layer in layers["layers"] for name in layer.replace("|", ":").split(":")}
    children = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    children |= {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert named == children
    assert "fold" in layers["layers"][-1].split(" | ") and layers["layers"][0].startswith("cli")
    assert contracts["acyclic"]["ancestors"] == ["refold"]


_LAYERS, _STORAGE, _ACYCLIC = "refold's packages", "inside storage", "no import cycles"


@pytest.mark.parametrize("module, code, contracts", [
    # storage imports the core, so a core importing storage also closes a cycle
    ("fold/merge.py", "def _violation():\n    from refold.storage.layout import Layout\n", {_LAYERS, _ACYCLIC}),
    # a helper below the facade reaching up to it, function-local
    ("engine/progress.py", "def _violation():\n    from refold.memory import Memory\n", {_LAYERS, _ACYCLIC}),
    # ... or for an annotation only: type-only imports count
    ("reads/overlay.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from refold.memory import Memory\n",
     {_LAYERS, _ACYCLIC}),
    # inside storage: the plumbing reaching up to a derived store
    ("storage/files/versions.py", "def _violation():\n    from refold.storage.state import StateStore\n",
     {_STORAGE, _ACYCLIC}),
])
def test_a_violating_import_breaks_its_contracts(tmp_path, module, code, contracts):
    """The contracts bite: one added import in a copy of the package breaks exactly the contracts
    that forbid it."""
    root = tmp_path / "src"
    root.mkdir()
    shutil.copytree(PACKAGE, root / "refold", ignore=_NOT_SOURCE)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    target = root / "refold" / module
    target.write_text(target.read_text() + "\n\n" + code)
    done = _lint_imports(root)
    assert done.returncode == 1, done.stdout[-3000:]
    broken = [row for row in done.stdout.splitlines() if row.endswith(" BROKEN")]
    assert {c for c in (_LAYERS, _STORAGE, _ACYCLIC) for row in broken if row.startswith(c)} == contracts
    assert len(broken) == len(contracts), done.stdout[-3000:]


def test_no_product_module_imports_the_reference_fold():
    """The reference fold holds the whole state in one process: it is the tests' oracle, never a
    product path (design: "small, pure, never on a product path")."""
    assert (PACKAGE / "fold" / "reference.py").is_file()
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "fold" / "reference.py":
            continue
        package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
                module = ".".join([*base, *([node.module] if node.module else [])])
                names = [f"{module}.{a.name}" for a in node.names] + [module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any(n == "refold.fold.reference" or n.startswith("refold.fold.reference.") for n in names):
                importers.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert importers == [], f"product modules import the test oracle: {importers}"


# -- public import paths ---------------------------------------------------------------------------

def test_the_erasure_verbs_hand_out_the_packages_objects():
    """``refold.erasure.verbs`` (what the facade calls) hands out the very receipt and plan
    objects the erasure package's modules define: one definition of each."""
    from refold.erasure import planning, procedure, receipts
    from refold.erasure import verbs as erasing

    assert erasing.Receipt is receipts.Receipt and erasing.ReceiptReport is receipts.ReceiptReport
    assert procedure.ErasurePlan is planning.ErasurePlan is erasing.ErasurePlan
    assert callable(procedure.erase) and callable(procedure.plan) and procedure.STEPS[-1] == "receipt"


# -- no machine-specific paths ---------------------------------------------------------------------

#: Home folders and work trees of one machine, and named files in its temp folder. The bare temp
#: folder stays allowed: tests/test_jobs_cluster.py puts Ray's sockets there on purpose (POSIX's
#: temp dir, short enough for Ray's 107-byte socket paths).
_MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|home|root|Users)/|(?<![\w.~-])/tmp/\w")
#: Tracked files allowed to hold such paths, each with its reason.
_ALLOWED: set[str] = set()


def _tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, timeout=60)
    assert listed.returncode == 0, f"git ls-files failed: {listed.stderr.decode()[-500:]}"
    return [name for name in listed.stdout.decode().split("\0") if name]


def test_no_machine_specific_paths_in_tracked_files():
    offending = []
    files = _tracked_files()
    assert "tests/test_layout.py" in files or (REPO / "tests/test_layout.py").exists()
    for name in files:
        path = REPO / name
        if name in _ALLOWED or path.is_symlink() or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:  # binary (none today): no path literals to read
            continue
        offending += [f"{name}:{number}: {row.strip()[:160]}"
                      for number, row in enumerate(text.splitlines(), start=1) if _MACHINE_PATH.search(row)]
    assert not offending, "machine-specific paths (use a path relative to the repo root, or an "\
        "environment variable):\n" + "\n".join(offending)


def test_the_locomo_data_is_found_through_the_environment(tmp_path, monkeypatch):
    """REFOLD_LOCOMO_DIR (set by .ci/run) names the folder; without it, ../shared/data beside
    the repository root; when the archive is not there, the test fails saying how to get it."""
    from tests import locomo_helpers

    monkeypatch.delenv(locomo_helpers.ENV, raising=False)
    assert locomo_helpers.locomo_archive() == REPO.parent / "shared" / "data" / "locomo10.zip"

    with zipfile.ZipFile(tmp_path / "locomo10.zip", "w") as archive:
        archive.writestr("b.json", '{"sample_id": "b"}')
        archive.writestr("a.json", '{"sample_id": "a"}')
    monkeypatch.setenv(locomo_helpers.ENV, str(tmp_path))
    assert [c["sample_id"] for c in locomo_helpers.conversations()] == ["a", "b"]

    monkeypatch.setenv(locomo_helpers.ENV, str(tmp_path / "elsewhere"))
    with pytest.raises(pytest.fail.Exception, match="REFOLD_LOCOMO_DIR") as failed:
        locomo_helpers.conversations()
    assert str(tmp_path / "elsewhere" / "locomo10.zip") in str(failed.value)
