"""Old path of :mod:`dmlfe.io.classifier` (a fitted classifier saved beside its model).

Kept so that ``from dmlfe.classifier_files import load_classifier`` keeps working. The
module replaces itself with :mod:`dmlfe.io.classifier` in ``sys.modules`` rather than
copying its names: a name read, or patched, through the old path is then the one the
classifier files use.
"""

import sys

from dmlfe.io import classifier

sys.modules[__name__] = classifier
