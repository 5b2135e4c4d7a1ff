"""The notebook executes on a fixture export and reproduces the report's files."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[2] / "analysis" / "notebooks" / "contributions.ipynb"


def test_notebook_executes_on_fixture_export(seed_export, tmp_path, monkeypatch):
    out = tmp_path / "nb_out"
    monkeypatch.setenv("CONTRIBUTIONS_EXPORT", str(seed_export))
    monkeypatch.setenv("CONTRIBUTIONS_OUT", str(out))
    monkeypatch.setenv("CONTRIBUTIONS_BOOT", "100")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert (out / "contributions.md").exists() and (out / "contributions.png").exists()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "MLM contribution (full - nsp_only)" in text
    assert any("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code"
               for o in c.get("outputs", []))
