"""``python -m nosink.cli`` (as ``torchrun -m nosink.cli`` runs it): the same command line as ``nosink``."""

import sys

from nosink.cli import main

if __name__ == "__main__":
    sys.exit(main())
