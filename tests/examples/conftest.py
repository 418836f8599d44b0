"""The documented examples: the docs' code blocks and the tour notebook, run as a user would."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # _docblocks
