"""Old path of :mod:`dmlfe.cluster.profiles` (cluster profiles and the cluster kinds).

Kept so that ``import dmlfe.cluster_profiles`` and ``from dmlfe.cluster_profiles import
check_profile`` keep working. The module replaces itself with :mod:`dmlfe.cluster.profiles`
in ``sys.modules`` rather than copying its names: a name read, or patched, through the old
path is then the one the profiles use (a kind registered through either is one kind).
"""

import sys

from dmlfe.cluster import profiles

sys.modules[__name__] = profiles
