"""Test modules have unique basenames: pytest's default import mode ("prepend") cannot
collect two ``test_x.py`` in different folders without ``__init__.py`` files, and a clash
stops the whole run at collection (it happened: tests/unit and tests/distributed)."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_every_test_module_has_a_unique_basename():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    clashes = sorted(n for n, c in names.items() if c > 1)
    assert not clashes, f"test modules with the same name in different folders: {clashes}"
