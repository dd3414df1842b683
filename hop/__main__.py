"""``python -m hop`` is the ``hop`` command."""

import sys

from hop.cli import main

sys.exit(main())
