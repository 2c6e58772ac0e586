"""Old path of :mod:`dmlfe.store.layout` (the store's on-disk layout).

The module replaces itself with :mod:`dmlfe.store.layout` in ``sys.modules``, so that
``from dmlfe.store import _format`` gives the very module the store uses.
"""

import sys

from dmlfe.store import layout

sys.modules[__name__] = layout
