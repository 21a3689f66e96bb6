"""Make the tests' helper modules (e.g. ``gloo``) importable, also in spawned processes."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
