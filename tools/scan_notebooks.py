"""Consistency scan of executed notebooks: printed figures that contradict themselves, and noise.

    python -m tools.scan_notebooks build/notebooks                 # one line per finding
    python -m tools.scan_notebooks build/notebooks --json          # the findings as JSON
    python -m tools.scan_notebooks build/notebooks --known tools/scan_known.json   # only the unlisted

It reads what a reader of an executed ``NN_*.ipynb`` sees (stream text, the text/markdown or
else text/plain of results and displays, error outputs) and reports each finding with its
notebook and cell (0-based, as in the .ipynb). The kinds (:data:`KINDS`):

- ``over_ceiling``: a share of a ceiling above 100 % ("MFU 164%", "132% of attainable",
  "HFU / MFU: 137% / 164%", "74 GFLOP/s (127%)" beside a ceiling, "1.73 of its roof"). Speedups
  and "% slower" are not shares of a ceiling and are left alone; so is a timing that says it
  did not wait for the work (the course's demonstration of that bug).
- ``point_outside_interval``: "0.18x (90% interval 0.182x to 0.212x)", as
  :class:`perfkit.stats.Estimate` and :func:`perfkit.verdict.judge` print them.
- ``zero_width_interval``: "0.501 to 0.501".
- ``bound_not_missed``: a verdict on "at most E", "at least E" or "between 0 and E" (a share's
  upper bound) whose measured figure lies past E, with an outcome other than missed: a bound is
  missed when the measurement crosses it.
- ``path``: an absolute or temporary path (the checkout, /tmp, /home, ~/.cache, tempfile names).
- ``warning``: a "...Warning" or "Warning:" line, or anything written to stderr.
- ``error``: an error output or a traceback.
- ``profiler_chatter``: the profiler's own lines (USDT, Kineto, CUPTI).

Findings known today are listed in ``tools/scan_known.json`` with the reason each is still
there; :func:`compare` tells the findings no entry lists from the entries nothing matches.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KNOWN = ROOT / "tools" / "scan_known.json"
KINDS = ("over_ceiling", "point_outside_interval", "zero_width_interval", "bound_not_missed", "path",
         "warning", "error", "profiler_chatter")

# A printed number as perfkit.units.si writes it, with its unit: "0.18x", "35.7 ms", "1,200 ms",
# "-0.194", "164%", "153 GFLOP/s". The unit is optional; a word that merely starts like one
# ("12 steps") leaves the number bare.
_NUM = r"[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?"
_UNIT = r"(?:[kMGTPmµn]?(?:FLOP/s|FLOP|B/s|B|s|W|J|Hz)|x|%)"


def _numu(name: str) -> str:
    """A number and its optional unit, captured as ``name`` and ``name_u``. Neither side of a
    fraction ("4/3 of the roof": a multiple a bound is built from, not a measured share) is one."""
    return rf"(?<![\w./])(?P<{name}>{_NUM})(?:\s?(?P<{name}_u>{_UNIT}))?(?![\w/])"


_SCALE = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "m": 1e-3, "µ": 1e-6, "n": 1e-9}
_SEP = r"\s*(?:to|–|—|-)\s*"

# "0.18x (90% interval 0.182x to 0.212x, ...)", "1.2x (1.09x-1.26x)", "1.39 plain steps (90% interval ..."
_POINT_INTERVAL = re.compile(
    _numu("v") + r"(?P<named>(?:\s+[A-Za-z][\w-]*){0,3}?)\s*\((?P<words>[^()\n]{0,80}?)"
    + _numu("lo") + _SEP + _numu("hi") + r"(?=\s*[,;)])")
_INTERVAL = re.compile(  # "interval 0.501 to 0.501", without a point in front
    r"\b(?:interval|spread|range)\s+(?:of\s+|from\s+)?" + _numu("lo") + _SEP + _numu("hi"))
_INTERVAL_WORDS = re.compile(r"\b(?:interval|spread|range|CI|p\d+-p\d+|bootstrap|repeats|rounds)\b")
# perfkit.verdict.judge's label of the figure judged (one from elsewhere says so)
_FIGURE = r"(?:Measured|Figure, not measured in this run):\s*"
_BOUND = re.compile(  # perfkit.verdict.judge: "..., at most 1.81x. Measured: 2.14x (...): inconclusive"
    r"\b(?P<side>at most|at least|between 0 and) " + _numu("edge") + r"\.\s+" + _FIGURE + _numu("v")
    + r"(?:\s*\((?:[^()]|\([^()]*\))*\))?:\s*(?P<outcome>held|missed|inconclusive|disturbed)\b")

_CEILING_WORDS = r"(?:ceiling|peak|roof|roofline|attainable|copy bandwidth|memcpy)"
_SHARES = (  # a share of a ceiling, in percent ("164%") or as a fraction ("1.73 of its roof")
    re.compile(_numu("n") + r"\s+(?:of|=)\s+(?:[\w' -]{0,50}?\b)?" + _CEILING_WORDS + r"\b"),
    re.compile(r"\b[MH]FU\b[\w ]{0,20}?[:=]?\s*" + _numu("n") + r"(?<=%)"),
    re.compile(r"\b[MH]FU\s*/\s*[MH]FU\b[^\d\n]{0,20}" + _numu("m") + r"\s*/\s*" + _numu("n") + r"(?<=%)"),
    re.compile(r"(?:FLOP/s|B/s)\s*\(" + _numu("n") + r"(?<=%)\)"),  # "74 GFLOP/s (127%)"
    # a verdict on a share: "Prediction (model): the MLP step's HFU, at most 1. Measured: 1.37"
    re.compile(r"\):\s+(?=(?:[^.\n]|\.(?=\d))*?\b(?:[MH]FU|(?:over|of) (?:its|the) (?:\w+ ){0,3}?"
               r"(?:roof|ceiling|peak))\b)(?:[^.\n]|\.(?=\d))*?\.\s+" + _FIGURE + _numu("n")),
)
_NOT_WAITED = re.compile(r"naive|no wait|not waited|before the work", re.I)
_SHARE_CONTEXT = re.compile(_CEILING_WORDS + r"|\b[MH]FU\b")

_TMP = re.escape(tempfile.gettempdir().rstrip("/"))
_PATHS = (
    re.compile(r"(?<![\w.:/~-])(?:/[\w.@+-]+){2,}/?"),  # /tmp/x, /home/me/..., /usr/lib/python3
    re.compile(r"(?<![\w/])~/[\w.]"),  # ~/.cache
    re.compile(rf"{_TMP}/|\btmp[a-z0-9_]{{8}}\b|pytest-of-"),  # tempfile's folders and names
    re.compile(r"\b[A-Z]:\\\\?(?:Users|Windows|Temp)\b"),
)
_WARNING = re.compile(r"\b[A-Z]\w*Warning\b|^\s*(?:Warning|WARNING)\b|\bwarnings\.warn\(")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
_PROFILER = re.compile(r"\bUSDT\b|\b[Kk]ineto\b|\bCUPTI\b|\bSTAGE:\d|\bprofiler_(?:start|stop)\b")


@dataclass(frozen=True)
class Finding:
    """One thing a reader would stop at: where it is, its kind, the line and why it is wrong."""

    notebook: str  # the notebook's stem, e.g. "06_compute"
    cell: int      # 0-based index into the notebook's cells
    kind: str      # one of KINDS
    text: str      # the output line it is on (at most 200 characters)
    detail: str    # what is wrong, with the numbers

    def line(self) -> str:
        return f"{self.notebook} cell {self.cell} [{self.kind}] {self.detail}: {self.text}"


@dataclass(frozen=True)
class Known:
    """A finding known today (an entry of ``tools/scan_known.json``): it matches every finding of
    its notebook and kind whose line contains ``match``. ``intermittent`` (a reason) marks one
    that depends on measured numbers and need not occur in every run."""

    notebook: str
    kind: str
    match: str
    reason: str
    intermittent: str = ""

    def covers(self, f: Finding) -> bool:
        return f.notebook == self.notebook and f.kind == self.kind and self.match in f.text


def _value(m: re.Match, name: str) -> tuple[float, str]:
    """The number captured as ``name`` in SI base units, and its unit without the prefix."""
    x = float(m.group(name).replace(",", "").replace("−", "-"))
    unit = m.group(f"{name}_u") or ""
    if unit not in ("x", "%") and len(unit) > 1 and unit[0] in _SCALE:
        return x * _SCALE[unit[0]], unit[1:]
    return x, unit


def _shown(m: re.Match, name: str) -> str:
    """The number captured as ``name`` with its unit, as printed."""
    return m.string[m.start(name):m.end(f"{name}_u") if m.group(f"{name}_u") else m.end(name)]


def _interval(m: re.Match) -> tuple[float, float, str] | None:
    """``(low, high, unit)`` of a matched interval, or ``None`` where its two ends differ in unit;
    a low end printed bare takes the high end's unit, prefix and all ("46.5 to 50.4 ms")."""
    (lo, lu), (hi, hu) = _value(m, "lo"), _value(m, "hi")
    if lu and lu != hu:
        return None
    raw = m.group("hi_u") or ""
    if not m.group("lo_u") and raw not in ("x", "%") and len(raw) > 1 and raw[0] in _SCALE:
        lo *= _SCALE[raw[0]]
    return lo, hi, hu


def _intervals(line: str) -> Iterable[tuple[str, str]]:
    """(kind, detail) of each interval on ``line`` that holds no width or misses its own point."""
    seen = set()
    for m in _POINT_INTERVAL.finditer(line):
        (v, vu), iv = _value(m, "v"), _interval(m)
        words = m.group("words").strip()
        named = bool(_INTERVAL_WORDS.search(words)) or (not words and not m.group("named") and bool(vu))
        if iv is None or not named or (iv[2] != vu and iv[2]):
            continue
        if not vu and re.fullmatch(r"\d+", m.group("v")) and not iv[0] == iv[1] == v:
            continue  # a bare whole number is a size or a count ("multiples of 64 (..."), not the point
        lo, hi, _ = iv
        seen.add(m.start("lo"))
        span = f"{_shown(m, 'lo')} to {_shown(m, 'hi')}"
        if lo == hi:
            yield "zero_width_interval", f"the interval {span} has no width"
        elif not lo <= v <= hi:
            yield "point_outside_interval", f"{_shown(m, 'v')} lies outside its interval {span}"
    for m in _INTERVAL.finditer(line):
        iv = _interval(m)
        if m.start("lo") not in seen and iv is not None and iv[0] == iv[1]:
            yield "zero_width_interval", f"the interval {m.group(0)} has no width"


def _share(m: re.Match, name: str) -> float | None:
    """The share captured as ``name`` (1.0 is 100 %), ``None`` for a figure with another unit."""
    x, unit = _value(m, name)
    return x / 100 if unit == "%" else x if unit in ("x", "") else None


def _shares(line: str) -> Iterable[str]:
    """Details of each share of a ceiling above 100 % on ``line`` (an interval's top above 100 % is
    not one: the interval of a figure at its ceiling reaches past it by noise alone)."""
    if _NOT_WAITED.search(line) or not _SHARE_CONTEXT.search(line):
        return
    checked: set[int] = set()
    for pattern in _SHARES:
        for m in pattern.finditer(line):
            for name in {"m", "n"} & set(m.re.groupindex):
                share = _share(m, name)
                if share is not None and m.start(name) not in checked:
                    checked.add(m.start(name))
                    if share > 1:
                        yield f"{_shown(m, name)} of a ceiling (above 100%)"


def _bounds(line: str) -> Iterable[str]:
    for m in _BOUND.finditer(line):
        (edge, eu), (v, vu) = _value(m, "edge"), _value(m, "v")
        if eu != vu or m.group("outcome") == "missed":
            continue
        past = v < edge if m.group("side") == "at least" else v > edge  # "between 0 and": at most
        if past:
            yield (f"measured {_shown(m, 'v')} is past the bound {m.group('side')} {_shown(m, 'edge')}, "
                   f"yet the verdict is {m.group('outcome')}")


def _paths(line: str) -> Iterable[str]:
    here = str(ROOT)
    if here in line:
        yield "the checkout's absolute path"
        return
    for pattern in _PATHS:
        if m := pattern.search(line):
            yield f"a path: {m.group(0)}"
            return


def scan_text(text: str, stderr: bool = False) -> list[tuple[str, str, str]]:
    """Every finding in one output's ``text``: ``(kind, line, detail)``.

    Args:
        text: an output's text (a stream, a result's text/markdown or text/plain, an error's
            traceback).
        stderr: the text was written to stderr (reported once, as a warning, by its first line).
    """
    found: list[tuple[str, str, str]] = []
    lines = [ln.strip() for ln in text.replace("**", "").splitlines() if ln.strip()]
    if stderr and (said := [ln for ln in lines if not _PROFILER.search(ln)]):
        found.append(("warning", said[0], "written to stderr"))
    for line in lines:
        found += [(kind, line, d) for kind, d in _intervals(line)]
        found += [("over_ceiling", line, d) for d in _shares(line)]
        found += [("bound_not_missed", line, d) for d in _bounds(line)]
        found += [("path", line, d) for d in _paths(line)]
        if not stderr and _WARNING.search(line):
            found.append(("warning", line, "a warning in the output"))
        if _TRACEBACK.search(line):
            found.append(("error", line, "a traceback in the output"))
        if _PROFILER.search(line):
            found.append(("profiler_chatter", line, "the profiler's own output"))
    return found


def output_texts(output: dict) -> list[tuple[str, bool]]:
    """What a reader sees of one output, as ``(text, written to stderr)``: a stream's text, a
    result's text/markdown (else its text/plain). An error output gives none: it is one
    finding itself (:func:`scan_notebook`), and its traceback's paths are not more findings."""
    kind = output.get("output_type")
    if kind == "stream":
        return [(output.get("text", ""), output.get("name") == "stderr")]
    if kind == "error":
        return []
    data = output.get("data", {})
    text = data.get("text/markdown") or data.get("text/plain") or ""
    return [("".join(text) if isinstance(text, list) else text, False)]


def scan_notebook(nb, name: str) -> list[Finding]:
    """Every finding in one executed notebook (an ``nbformat`` node), named ``name`` (its stem)."""
    found: list[Finding] = []
    for index, cell in enumerate(nb.cells):
        seen = set()
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                error = f"{output.get('ename', 'Error')}: {output.get('evalue', '')}".splitlines()[0]
                seen.add(("error", error[:200]))
                found.append(Finding(name, index, "error", error[:200], "an error output"))
            for text, stderr in output_texts(output):
                for kind, line, detail in scan_text(text, stderr):
                    if (kind, line[:200]) not in seen:
                        seen.add((kind, line[:200]))
                        found.append(Finding(name, index, kind, line[:200], detail))
    return found


def notebooks_in(paths: Sequence[Path | str]) -> list[Path]:
    """The executed lecture notebooks (``NN_*.ipynb``) in ``paths`` (folders or files), sorted."""
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(p.glob("[0-9][0-9]_*.ipynb")) if p.is_dir() else [p]
    return out


def scan(paths: Sequence[Path | str]) -> list[Finding]:
    """Every finding in the executed notebooks at ``paths`` (folders or ``.ipynb`` files)."""
    import nbformat

    found: list[Finding] = []
    for path in notebooks_in(paths):
        found += scan_notebook(nbformat.read(path, as_version=4), path.stem)
    return found


def load_known(path: Path | str = KNOWN) -> list[Known]:
    """The entries of a known-findings file (``{"findings": [{notebook, kind, match, reason}]}``).

    Raises:
        ValueError: for an entry without a notebook, a kind among :data:`KINDS`, a non-empty
            match or a reason.
    """
    entries = json.loads(Path(path).read_text())["findings"]
    known = []
    for i, e in enumerate(entries):
        if e.get("kind") not in KINDS or not all(e.get(k) for k in ("notebook", "match", "reason")):
            raise ValueError(f"{path} entry {i} needs notebook, kind (one of {KINDS}), match and reason; "
                             f"got {e!r}")
        known.append(Known(e["notebook"], e["kind"], e["match"], e["reason"], e.get("intermittent", "")))
    return known


def compare(findings: Sequence[Finding], known: Sequence[Known],
            notebooks: Iterable[str]) -> tuple[list[Finding], list[Known]]:
    """``(new, stale)``: the findings no entry covers, and the entries of the scanned ``notebooks``
    (stems) that cover no finding (other than intermittent ones): the list may only shrink."""
    scanned = set(notebooks)
    new = [f for f in findings if not any(k.covers(f) for k in known)]
    stale = [k for k in known if k.notebook in scanned and not k.intermittent
             and not any(k.covers(f) for f in findings)]
    return new, stale


def report(new: Sequence[Finding], stale: Sequence[Known]) -> str:
    """The findings that are not listed, and the listed ones that no longer occur, one a line."""
    lines = [f"not in {KNOWN.name}: {f.line()}" for f in new]
    lines += [f"listed in {KNOWN.name} but gone (remove the entry): {k.notebook} [{k.kind}] "
              f"{k.match!r}" for k in stale]
    return "\n".join(lines)


def summary(paths: Sequence[Path | str], known_path: Path | str = KNOWN, shown: int = 5) -> str:
    """A few lines for the end of ``make course``: how many findings, how many are listed as
    known, how many listed ones did not occur, and the first ``shown`` findings not listed."""
    findings, known = scan(paths), load_known(known_path)
    scanned = {p.stem for p in notebooks_in(paths)}
    new, stale = compare(findings, known, scanned)
    unseen = [k for k in known if k.notebook in scanned and not any(k.covers(f) for f in findings)]
    books = len({f.notebook for f in findings})
    lines = [f"consistency scan (python -m tools.scan_notebooks): {len(findings)} finding(s) in {books} "
             f"of the {len(scanned)} notebook(s) scanned, "
             f"{len(findings) - len(new)} of them listed in tools/{Path(known_path).name}, "
             f"{len(new)} not"]
    if unseen:
        lines.append(f"  {len(unseen)} listed finding(s) did not occur, {len(stale)} of them not "
                     "intermittent (remove those entries)")
    lines += [f"  {f.line()[:160]}" for f in new[:shown]]
    if len(new) > shown:
        lines.append(f"  ... and {len(new) - shown} more")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Scan executed notebooks for figures that contradict "
                                 "themselves and for noise in their outputs.")
    ap.add_argument("paths", nargs="+", help="folders of executed notebooks (NN_*.ipynb) or .ipynb files")
    ap.add_argument("--json", action="store_true", help="print the findings as a JSON list")
    ap.add_argument("--known", help="a known-findings file (tools/scan_known.json): report only the "
                    "findings it does not list and its entries that no longer occur")
    args = ap.parse_args(argv)
    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        print(f"error: nothing at {', '.join(missing)}", file=sys.stderr)
        return 2
    findings = scan(args.paths)
    stale: list[Known] = []
    if args.known:
        findings, stale = compare(findings, load_known(args.known),
                                  {p.stem for p in notebooks_in(args.paths)})
    if args.json:
        print(json.dumps({"findings": [asdict(f) for f in findings],
                          "stale": [asdict(k) for k in stale]} if args.known
                         else [asdict(f) for f in findings], indent=1))
    else:
        print(report(findings, stale) if args.known else "\n".join(f.line() for f in findings))
    return 1 if findings or stale else 0


if __name__ == "__main__":
    sys.exit(main())
