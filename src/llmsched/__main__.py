"""``python -m llmsched``: the ``llmsched`` command."""

import sys

from llmsched.cli import main

if __name__ == "__main__":
    sys.exit(main())
