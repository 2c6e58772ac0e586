"""Old path of :mod:`dmlfe.io.model` (the saved-model format: its schema, save and read).

Kept so that ``from dmlfe.model_files import save_model`` keeps working. The module
replaces itself with :mod:`dmlfe.io.model` in ``sys.modules`` rather than copying its
names: a name read, or patched, through the old path is then the one the format uses.
The schema engine (:class:`~dmlfe.io.schema.Key`, :class:`~dmlfe.io.schema.ArraySpec`)
is :mod:`dmlfe.io.schema`; both names are still read from here.
"""

import sys

from dmlfe.io import model

sys.modules[__name__] = model
