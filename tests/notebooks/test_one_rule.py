"""Every verdict in every lecture is made by perfkit.verdict's one rule, from perfkit.stats.

A notebook may not build a verdict another way: no hand-made Verdict or ClaimVerdict, no
``spread=`` assembled in the notebook (an interval comes from perfkit.stats as an Estimate),
no ``busy()`` threaded by hand (the rule names a busy machine itself), no stock "too noisy"
sentence (the rule computes the distance against the interval's half-width).
"""

import ast
from pathlib import Path

import pytest

SOURCES = sorted((Path(__file__).resolve().parents[2] / "notebooks" / "src").glob("[0-9][0-9]_*.py"))


def offences(text: str) -> list[str]:
    """What in one notebook source builds a verdict outside the one rule (empty: none)."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in ("Verdict", "ClaimVerdict"):
            found.append(f"line {node.lineno}: {name}(...) built by hand")
        if name == "busy":
            found.append(f"line {node.lineno}: busy() threaded by hand (the rule adds the load)")
        if name in ("judge", "verdict", "assess") and any(k.arg == "spread" for k in node.keywords):
            found.append(f"line {node.lineno}: {name}(spread=...) assembled in the notebook "
                         "(pass a perfkit.stats Estimate)")
    for i, line in enumerate(text.splitlines(), 1):
        if "too noisy" in line:
            found.append(f"line {i}: a stock 'too noisy' sentence")
    return found


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_verdicts_come_from_the_one_rule(src):
    bad = offences(src.read_text())
    assert not bad, f"{src.name} builds verdicts outside perfkit.verdict's rule:\n  " + "\n  ".join(bad)


def test_the_check_catches_each_way_around_the_rule():
    assert offences("viz.show_verdict(Verdict(p, 1.0, None, 'held', 'inside', 't'))")
    assert offences("viz.verdict(p, r, spread=(min(rs), max(rs)))")
    assert offences("viz.show_verdict(judge(p, r, spread=(lo, hi)))")
    assert offences("assess(c, r, spread=s)")
    assert offences("x = {'above': 'slow' + busy()}")
    assert offences("# the run was too noisy to tell")
    assert not offences("viz.verdict(p, stats.median_ratio(a, b), explain={'above': 'why'})")
