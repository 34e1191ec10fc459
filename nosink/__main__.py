"""``python -m nosink``: the same command line as the ``nosink`` script."""

import sys

from nosink.cli import main

if __name__ == "__main__":
    sys.exit(main())
