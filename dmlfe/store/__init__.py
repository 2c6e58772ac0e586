"""The dmlfe store: chunked sparse zarr v3 in anndata's layout, written atomically.

The public names are imported on first use (PEP 562): a dask worker that reads a chunk
imports :mod:`dmlfe.store.reader` only, not the writer and the Parquet bridge (pandas and
pyarrow, whose import would be a visible part of a fresh worker's first task).
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    **dict.fromkeys(("check_export", "export_parquet", "import_parquet"),
                    "dmlfe.store.parquet"),
    **dict.fromkeys(("export_svmlight", "export_xmc"), "dmlfe.store.xmc"),
    **dict.fromkeys(("IncompleteStoreError", "Store", "history", "open_store"),
                    "dmlfe.store.reader"),
    **dict.fromkeys(("StoreWriter", "write_piece"), "dmlfe.store.writer"),
}

__all__ = [
    "IncompleteStoreError",
    "Store",
    "StoreWriter",
    "check_export",
    "export_parquet",
    "export_svmlight",
    "export_xmc",
    "history",
    "import_parquet",
    "open_store",
    "write_piece",
]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'dmlfe.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # the next lookup is an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
