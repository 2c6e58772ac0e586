"""The main job: ``dmlfe demo`` runs the demo pipeline (``pipelines/demo.yaml``).

A synthetic labelled corpus the project generates itself is ingested, MDDMp, MVMD,
PCA and no reduction are compared with the ridge classifier, and a report (JSON,
Markdown, PNG plots) is written; nothing outside the source tree is needed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dmlfe.pipeline.runner import run_pipeline

_SOURCE_PIPELINES = Path(__file__).resolve().parent.parent / "pipelines"
#: Where a (non-editable) install puts them: package data (see setup.py).
_INSTALLED_PIPELINES = Path(__file__).resolve().parent / "pipelines"


def demo_pipeline_path() -> Path:
    """``pipelines/demo.yaml``: ``$DMLFE_PIPELINES``, the source tree, the installed copy."""
    dirs = [Path(os.environ["DMLFE_PIPELINES"])] if os.environ.get("DMLFE_PIPELINES") else []
    dirs += [_SOURCE_PIPELINES, _INSTALLED_PIPELINES]
    for d in dirs:
        if (d / "demo.yaml").is_file():
            return d / "demo.yaml"
    raise FileNotFoundError(
        f"the demo pipeline was not found (looked for demo.yaml in {', '.join(map(str, dirs))}); "
        "it is installed with dmlfe (reinstall it), or set DMLFE_PIPELINES to a folder "
        "holding demo.yaml")


def run_demo(work_dir: str | os.PathLike[str] | None = "dmlfe-work/demo", *, client: Any = None,
             fresh: bool = False, progress: bool = True) -> Any:
    """Run the demo pipeline; returns the :class:`dmlfe.pipeline.RunResult` (its
    ``report_dir`` holds report.md, report.json and the plots)."""
    return run_pipeline(demo_pipeline_path(), work_dir=work_dir, client=client, fresh=fresh,
                        progress=progress)
