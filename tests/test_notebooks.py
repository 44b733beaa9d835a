"""The notebooks in notebooks/ are committed with their outputs, and still run.

- every committed notebook carries the outputs of one clean top-to-bottom run: every code cell
  has an output, the execution counts run 1, 2, 3, ..., and among the outputs there is at least
  one table (a DataFrame) and at least one plot (a PNG); nothing printed names a machine's
  absolute path (a temporary or home folder, a checkout);
- every notebook runs top to bottom (nbclient), each in its own temporary working directory, on
  a kernel that is this interpreter (the venv), and the run gives each cell the same kinds of
  output (table, plot) as the committed copy shows: outputs were not left stale by an edit.

To refresh the committed outputs after editing a notebook, run it in a scratch directory and
write it back, e.g. with nbclient's NotebookClient(nb, resources={"metadata": {"path": tmp}}).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
KERNEL = "refold-test-venv"
MAX_BYTES = 300_000
# absolute paths of the machine that ran the notebook: temporary folders, homes, checkouts
# (the alternatives are joined from parts, so this file holds no machine path itself)
MACHINE_PATH = re.compile(r"(?<![\w.])(" + "|".join(["/" + "tmp/", "/var/folders/", "/private/var/", "/" + r"home/\w",
                                                      "/" + r"Users/\w", "/" + "root/", "/" + "work/",
                                                      r"[A-Za-z]:\\Users\\"]) + ")")


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    """A kernelspec for sys.executable, so the kernel imports the same refold as the tests."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "refold (test venv)", "language": "python",
        "env": {"MPLBACKEND": "module://matplotlib_inline.backend_inline", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1"},
    }))
    return root


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def is_table(output) -> bool:
    """A DataFrame shown as a cell's result (polars or pandas: an HTML table or polars' text frame)."""
    data = output.get("data", {})
    return "<table" in data.get("text/html", "") or data.get("text/plain", "").startswith("shape: (")


def is_plot(output) -> bool:
    return "image/png" in output.get("data", {})


def kinds(cell) -> set[str]:
    outputs = cell.get("outputs", [])
    return {name for name, test in (("table", is_table), ("plot", is_plot)) if any(map(test, outputs))}


def output_text(output) -> str:
    """Everything an output shows as text (not the base64 of images)."""
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return "\n".join([output.ename, output.evalue, *output.traceback])
    return "\n".join(v if isinstance(v, str) else json.dumps(v) for k, v in output.get("data", {}).items()
                     if not k.startswith("image/"))


def test_the_three_notebooks_exist():
    assert {p.stem for p in NOTEBOOKS} >= {"quickstart", "time_travel", "erasure"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_with_its_outputs(path):
    nb = nbformat.read(path, as_version=4)
    cells = code_cells(nb)
    assert cells, f"{path.name} has no code"
    bare = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and not c.get("outputs")]
    assert not bare, (f"{path.name}: code cell(s) {bare} have no output; commit the notebook with the "
                      "outputs of a top-to-bottom run (see this module's docstring)")
    counts = [c.execution_count for c in cells]
    assert counts == list(range(1, len(cells) + 1)), \
        f"{path.name}: execution counts {counts}: not one clean top-to-bottom run"
    outputs = [o for c in cells for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"], f"{path.name} is committed with an error"
    assert any(map(is_table, outputs)), f"{path.name} shows no table"
    assert any(map(is_plot, outputs)), f"{path.name} shows no plot"
    assert path.stat().st_size < MAX_BYTES, f"{path.name} is {path.stat().st_size} bytes (lower the figures' dpi?)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_outputs_name_no_machine_path(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            found = MACHINE_PATH.search(output_text(output))
            assert not found, (f"{path.name} cell {i} prints a machine's path ({found.group(0)}...): "
                               "use store paths relative to the working directory")


def test_the_path_check_catches_a_temp_folder():
    leak = nbformat.v4.new_output("stream", text="Memory('/" + "tmp/pytest-of-ci/memory', mode='delete')\n")
    assert MACHINE_PATH.search(output_text(leak))
    fine = nbformat.v4.new_output("stream", text="Memory('./memory') state/tmp/facts, ./tmp/x\n")
    assert not MACHINE_PATH.search(output_text(fine))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path, tmp_path, kernel_dir, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_dir))
    committed = nbformat.read(path, as_version=4)
    nb = nbformat.read(path, as_version=4)
    source = "\n".join(c.source for c in code_cells(nb))
    assert "refold.memory" not in source and "._" not in source.replace("._repr", "")  # public API only
    for cell in code_cells(nb):
        cell.outputs, cell.execution_count = [], None
    NotebookClient(nb, kernel_name=KERNEL, timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in code_cells(nb) for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, "\n".join(output_text(o) for o in errors)
    images = [o for c in code_cells(nb) for o in c.get("outputs", []) if is_plot(o)]
    assert images, f"{path.name} shows no plot"
    assert (tmp_path / "memory" / "events").is_dir()  # it ran in its own working directory
    stale = [i for i, (old, new) in enumerate(zip(committed.cells, nb.cells))
             if new.cell_type == "code" and kinds(old) != kinds(new)]
    assert not stale, (f"{path.name}: the committed outputs of cell(s) {stale} differ in kind (table, plot) "
                       "from a fresh run: rerun the notebook and commit its outputs")
