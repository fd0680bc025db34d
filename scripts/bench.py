#!/usr/bin/env python
"""Every benchmark, then the budgets judged: ``python scripts/bench.py [--quick]``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout, first

from scripts.bench.main import main

if __name__ == "__main__":
    sys.exit(main())
