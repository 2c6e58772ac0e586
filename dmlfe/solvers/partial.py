"""Old path of :mod:`dmlfe.solvers.leading` (the leading-eigenpair solvers).

Kept so that ``import dmlfe.solvers.partial`` and ``from dmlfe.solvers.partial import
leading_eigh`` keep working. The module replaces itself with :mod:`dmlfe.solvers.leading`
in ``sys.modules`` rather than copying its names: a name read, or patched, through the
old path is then the one the solvers use.
"""

import sys

from dmlfe.solvers import leading

sys.modules[__name__] = leading
