"""Make ``tests/strategies.py`` importable as ``strategies`` (shared hypothesis strategies)."""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parents[2])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
