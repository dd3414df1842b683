"""``python -m hop.coordinator``: the same as ``hop coordinator``."""

import sys

from hop.coordinator.cli import main

sys.exit(main())
