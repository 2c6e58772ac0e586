"""Every notebook under examples/ runs top to bottom in a fresh Jupyter kernel, as a
reader would run it (nbclient + ipykernel, not the cells exec'd in this process: the
kernel, its working directory and its environment are the notebook's own). The Reuters
notebook runs on its first documents (N_DOCS) and its F1 values are checked."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import nbformat
import pytest
from helpers import DATA, data_path
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "examples").glob("*.ipynb"))
#: Appended to the notebook in memory (not to the file): prints what it computed.
PROBE = ("import json as _json\n"
         "print('DMLFE-RESULTS', _json.dumps(globals().get('results')))")


def _kernel_spec(folder: Path) -> str:
    """A kernelspec running this interpreter, found before any other named alike."""
    name = "dmlfe-test-python"
    spec = folder / "kernels" / name
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "dmlfe tests", "language": "python"}))
    return name


def test_there_is_a_notebook():
    # an empty parametrisation below would pass without running anything
    assert (ROOT / "examples" / "reuters_mvmd_mddm.ipynb") in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path, tmp_path, monkeypatch):
    data_path("reuters21578", "reuters21578.tar.gz")  # skips, with the reason, when absent
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    # committed without outputs (they are generated, and would go stale)
    assert all(not c.outputs and c.execution_count is None for c in code), path.name

    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    kernel = _kernel_spec(tmp_path / "jupyter")
    monkeypatch.setenv("DMLFE_DATA", str(DATA))
    monkeypatch.setenv("DMLFE_WORK", str(tmp_path / "work"))
    monkeypatch.setenv("N_DOCS", "400")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    NotebookClient(nb, timeout=600, kernel_name=kernel,
                   resources={"metadata": {"path": str(path.parent)}}).execute()

    printed = "".join(o.get("text", "") for o in nb.cells[-1].outputs
                      if o.output_type == "stream")
    results = json.loads(printed.split("DMLFE-RESULTS", 1)[1])
    if path.name == "reuters_mvmd_mddm.ipynb":
        assert {"MVMD", "MDDM"} <= set(results)  # the supervised methods were evaluated
        pcas = [name for name in results if name.startswith("PCA d=")]
        assert {results[n]["d"] for n in pcas} == {results["MVMD"]["d"], results["MDDM"]["d"]}
        assert 1 <= results["MDDM"]["d"] <= 10  # MDDMp: at most q = 10 positive eigenvalues
        assert (tmp_path / "work" / "r10-comparison.png").stat().st_size > 0
    for name, values in (results or {}).items():
        for metric in ("micro_f1", "macro_f1"):
            v = values[metric]
            assert math.isfinite(v) and 0.0 <= v <= 1.0, (name, metric, v)
