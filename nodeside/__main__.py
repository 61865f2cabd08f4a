"""``python3 -m nodeside COMMAND ...``: the node helper (:mod:`nodeside.helper`) where ftwiz is installed."""

import sys

from nodeside.helper import main

sys.exit(main(sys.argv[1:]))
