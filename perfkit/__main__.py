"""``python -m perfkit``: see :mod:`perfkit.cli`."""

import sys

from perfkit.cli import main

sys.exit(main())
