"""The dmlfe store: chunked sparse zarr v3 in anndata's layout, written atomically."""

from dmlfe.store.parquet import check_export, export_parquet, import_parquet
from dmlfe.store.reader import IncompleteStoreError, Store, open_store
from dmlfe.store.writer import StoreWriter, write_piece

__all__ = [
    "IncompleteStoreError",
    "Store",
    "StoreWriter",
    "check_export",
    "export_parquet",
    "import_parquet",
    "open_store",
    "write_piece",
]
