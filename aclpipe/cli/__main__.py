"""``python -m aclpipe.cli``: the same as the ``aclpipe`` console script."""

import sys

from . import main

sys.exit(main())
