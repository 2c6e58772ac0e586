"""Old path of :mod:`dmlfe.io.loading` (loading saved models, checking a store against one).

Kept so that ``from dmlfe.model_io import load_model`` keeps working. The module
replaces itself with :mod:`dmlfe.io.loading` in ``sys.modules`` rather than copying its
names: a name read, or patched, through the old path is then the one loading uses.
"""

import sys

from dmlfe.io import loading

sys.modules[__name__] = loading
