"""Put tests/ on ``sys.path`` so the shared helpers import as ``helpers.<module>``, also in spawned processes."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import helpers  # noqa: F401  (importing it stops the tracker's clock: helpers/clock.py)
