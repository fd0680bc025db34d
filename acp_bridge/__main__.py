"""``python -m acp_bridge`` is ``acp-bridge``."""

import sys

from acp_bridge.cli.main import main

sys.exit(main())
