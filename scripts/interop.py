#!/usr/bin/env python
"""The interop matrix, offline: ``python scripts/interop.py [--quick]``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout, first

from scripts.interop.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
