"""``python -m dmlfe.cli``: the ``dmlfe`` command."""

import sys

from dmlfe.cli import main

sys.exit(main())
