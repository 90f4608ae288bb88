"""``python -m fedbandits.cli``: the command line."""

import sys

from fedbandits.cli import main

sys.exit(main())
