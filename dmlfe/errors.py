"""dmlfe's exceptions: one family, each naming the file (and line/field where known).

Every failure that comes from what a user gave dmlfe (a corpus file, a store, a
statistics cache entry, a saved model, a pipeline file, a parameter) is a
:class:`DmlfeError`. The command line prints a ``DmlfeError`` as one line on stderr
and exits with status 2; anything else is a bug and is reported as such (see
``dmlfe --debug``). Each class also derives from the built-in exception that code
written before this family caught (ValueError, FileNotFoundError...).
"""

from __future__ import annotations


class DmlfeError(Exception):
    """Base class of every error dmlfe raises about its inputs."""


class DataFormatError(DmlfeError, ValueError):
    """A corpus file is malformed; the message names the file, line/record and field."""


class StoreError(DmlfeError, ValueError):
    """A path is not a (complete, readable) dmlfe store."""


class ModelFormatError(DmlfeError, ValueError):
    """A saved model is damaged or is not a dmlfe model; the message names the file."""


class InputError(DmlfeError, ValueError):
    """The data cannot be used as asked (e.g. no documents, no features, no labels)."""


class MissingPathError(DmlfeError, FileNotFoundError):
    """A file or folder that was named does not exist."""


class ClusterProfileError(DmlfeError, ValueError):
    """A cluster profile is malformed; the message names the file and the field."""


class ClusterUnreachableError(DmlfeError, ConnectionError):
    """No dask scheduler answered at the address given within the connect timeout."""


class NoWorkersError(DmlfeError, TimeoutError):
    """A dask scheduler was reached but no worker joined it within the worker timeout."""


class MissingExtraError(DmlfeError, ImportError):
    """A feature needs an optional library; the message names the ``dmlfe[...]`` extra."""
