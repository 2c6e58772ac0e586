"""dmlfe: distributed multi-label feature extraction on dask."""

from dmlfe._version import __version__

__all__ = ["__version__"]
