"""Every notebook in notebooks/ runs top to bottom (nbclient), each in its own temporary working
directory, on a kernel that is this interpreter (the venv), and draws at least one plot."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
KERNEL = "refold-test-venv"


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


def test_the_three_notebooks_exist():
    assert {p.stem for p in NOTEBOOKS} >= {"quickstart", "time_travel", "erasure"}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path, tmp_path, kernel_dir, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_dir))
    nb = nbformat.read(path, as_version=4)
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "refold.memory" not in source and "._" not in source.replace("._repr", "")  # public API only
    NotebookClient(nb, kernel_name=KERNEL, timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert images, f"{path.name} shows no plot"
    assert (tmp_path / "memory" / "events").is_dir()  # it ran in its own working directory
