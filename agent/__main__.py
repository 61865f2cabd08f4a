"""``python -m agent ...`` is ``ftwiz-agent ...``."""

import sys

from .cli import main

sys.exit(main())
