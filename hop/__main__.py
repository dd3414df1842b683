"""``python -m hop`` is the ``hop`` command."""

import sys

from hop.prelaunch import main

sys.exit(main())
