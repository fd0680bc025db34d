"""The TypeScript SDK for interop tests: ``npm ci`` against the committed lockfile in
tests/interop/node, run once per test session however many xdist workers ask for it.

``npm ci`` deletes node_modules before installing, so two workers running it at once would pull
the SDK from under each other's running tests: an exclusive lock file serializes them, and
whoever comes second finds the install done (it is redone only when the lockfile is newer).
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parent / "interop" / "node"


def ensure_node_sdk() -> Path:
    """tests/interop/node with its packages installed; skips the test with the reason when
    Node or npm is missing, or the install fails (offline)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed for the TypeScript SDK interop tests")
    installed = NODE_DIR / "node_modules" / ".package-lock.json"
    lock = NODE_DIR / "package-lock.json"
    with open(NODE_DIR / ".install.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if installed.exists() and installed.stat().st_mtime >= lock.stat().st_mtime:
            return NODE_DIR
        result = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline"],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=300,
        )
    if result.returncode != 0:
        pytest.skip(f"npm ci failed in {NODE_DIR} (offline?): {result.stderr.strip()[-300:]}")
    return NODE_DIR
