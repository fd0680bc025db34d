#!/usr/bin/env python
"""The bounded soak, then its invariants: ``python scripts/soak.py [--minutes N]``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout, first

from scripts.soak.main import main

if __name__ == "__main__":
    sys.exit(main())
