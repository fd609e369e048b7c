"""perfkit's layout: wings named after the syllabus, dependencies pointing one way.

The base (``timing``, ``roofline``, ``hw``, ``dist``, ``models``, ``verdict``) is used by
every wing; the topic wings (``profiling``, ``comm``, ``parallel``, ``compress``,
``memory``, ``compute``, ``data``) may use the base and each other without cycles;
``viz``, ``jobs`` (the experiment drivers torchrun starts) and ``cli`` sit on top and
nothing below imports them. Only ``viz`` imports matplotlib or ipywidgets.
"""

import ast
from pathlib import Path

import pytest

import perfkit

ROOT = Path(perfkit.__file__).parent
BASE = {"timing", "roofline", "hw", "imitate", "dist", "torchrun", "models", "verdict", "verdict_text",
        "advice", "stats", "estimate", "joint", "order_stats", "units", "_checks", "_files"}
TOP = {"viz", "jobs", "cli", "__main__"}
HW = {"timing", "roofline", "hw", "hw_sweep", "imitate"}  # the measuring base; hw re-exports hw_sweep
MAX_LINES = 420  # "no module grows past ~400 lines"


def modules():
    return sorted(p for p in ROOT.rglob("*.py"))


def wing_of(name: str) -> str:
    return name.split(".")[1] if name.count(".") else ""


def imports_of(path: Path) -> set[str]:
    """Every perfkit module or wing ``path`` imports, at any depth (lazy imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("perfkit"):
            found.add(node.module)
            if node.module == "perfkit":
                found.update(f"perfkit.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("perfkit."))
    return found


def wing_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for p in modules():
        rel = p.relative_to(ROOT).with_suffix("")
        wing = rel.parts[0]
        deps = {wing_of(m) for m in imports_of(p)} - {"", wing, "__version__"}
        graph.setdefault(wing, set()).update(deps)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path + [node, nxt]
            if nxt not in state and (c := visit(nxt, path + [node])):
                return c
        state[node] = 2
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n, [])):
            return c
    return None


def test_the_wings_are_the_syllabus_topics():
    wings = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert wings == {"profiling", "comm", "parallel", "compress", "memory", "compute", "data",
                     "plan", "saving", "viz", "jobs"}


def test_no_grab_bag_of_workers():
    # experiment drivers live in perfkit.jobs, the labs' graders in tools.labs; "workers"
    # would also be mistaken for DataLoader workers (module 07)
    assert not (ROOT / "workers").exists(), "perfkit/workers is gone: use perfkit/jobs or tools/labs"


def test_wing_dependencies_have_no_cycle():
    assert find_cycle(wing_graph()) is None, f"import cycle between wings: {find_cycle(wing_graph())}"


def test_cycle_finder_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) is not None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_nothing_below_imports_the_top_layers():
    graph = wing_graph()
    for wing, deps in graph.items():
        if wing in TOP:
            continue
        assert not deps & TOP, f"perfkit.{wing} imports {sorted(deps & TOP)}: the layers on top"
        if wing in BASE:
            # stats, units, _checks and _files are the floor (numbers, files); timing, roofline,
            # hw stand on it
            floor = {"stats", "estimate", "joint", "order_stats", "units", "_checks", "_files"}
            low = (floor if wing in floor else
                   HW | floor if wing in HW else BASE)
            assert deps <= low, f"base module perfkit.{wing} imports wings {sorted(deps - low)}"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_is_small_and_plot_free(path):
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"{path.name}: split it (over {MAX_LINES} lines)"
    if path.relative_to(ROOT).parts[0] != "viz":
        for lib in ("matplotlib", "ipywidgets"):
            assert f"import {lib}" not in text and f"from {lib}" not in text, (
                f"{path.name} imports {lib}: plots and widgets belong in perfkit.viz")


@pytest.mark.parametrize("wing", ["profiling", "comm", "parallel", "compress", "memory", "compute",
                                  "data", "plan", "saving"])
def test_each_wing_reexports_its_modules_public_names(wing):
    import importlib

    pkg = importlib.import_module(f"perfkit.{wing}")
    for p in sorted((ROOT / wing).glob("[!_]*.py")):
        mod = importlib.import_module(f"perfkit.{wing}.{p.stem}")
        for name in mod.__all__:
            assert getattr(pkg, name) is getattr(mod, name), f"perfkit.{wing} lacks {name}"
            assert name in pkg.__all__


def readme_gaps(readme: str) -> list[str]:
    """Library modules (not viz/jobs, not private) that README's module table does not name."""
    gaps = []
    for p in modules():
        rel = p.relative_to(ROOT).with_suffix("")
        if rel.name.startswith("_") or rel.parts[0] in ("viz", "jobs", "__main__"):
            continue
        name = ".".join(("perfkit", *rel.parts))
        if f"| `{name}`" not in readme and f"`{name}`:" not in readme:
            gaps.append(name)
    return gaps


def test_readme_names_every_module():
    # a newcomer finds each concept from README's table, under its wing
    readme = (ROOT.parent / "README.md").read_text()
    assert readme_gaps(readme) == [], "add these modules to README's module table"
    assert readme_gaps(readme.replace("| `perfkit.parallel.zero3`", "| zero3")) == ["perfkit.parallel.zero3"]


# --- the repository: library <- course tooling <- tests, never the reverse ----------------

REPO = ROOT.parent
# what each folder's Python code must not import (top-level names): perfkit knows nothing of
# the course; the course tooling (tools/, with the labs' graders) nothing of the tests, so
# that `make grade` works from a student's copy and the tests only ever import downwards
FORBIDDEN = {"perfkit": {"tools", "tests", "benchmarks", "examples", "solutions", "notebooks"},
             "tools": {"tests", "benchmarks", "solutions", "notebooks"},
             "benchmarks": {"tests"}, "solutions": {"tests"}, "notebooks": {"tests"},
             "examples": {"tools", "tests"}}


def top_level_imports(text: str) -> set[str]:
    """The first component of every absolute import in ``text``, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
    return found


def reverse_imports(files: dict[str, str]) -> list[str]:
    """``folder/file: imports name`` for every import of ``files`` (path -> source) that
    :data:`FORBIDDEN` rules out."""
    bad = []
    for rel, text in sorted(files.items()):
        banned = FORBIDDEN.get(rel.split("/")[0], set())
        bad += [f"{rel}: imports {name}" for name in sorted(top_level_imports(text) & banned)]
    return bad


def test_imports_point_from_tests_to_tools_to_perfkit():
    files = {str(p.relative_to(REPO)): p.read_text() for folder in FORBIDDEN
             for p in (REPO / folder).rglob("*.py") if ".ipynb_checkpoints" not in p.parts}
    assert files, "no sources found"
    assert reverse_imports(files) == []


def test_reverse_import_finder_finds_planted_ones():
    planted = {"tools/grade.py": "def f():\n    from tests.labs import checks_lab02\n",
               "perfkit/dist.py": "import tools.grade\n",
               "perfkit/x.py": "from tools import grade\n",
               "perfkit/y.py": "from . import tools\n",  # relative: perfkit's own module
               "tests/t.py": "import tools.grade\nimport perfkit\n"}
    assert reverse_imports(planted) == ["perfkit/dist.py: imports tools",
                                        "perfkit/x.py: imports tools",
                                        "tools/grade.py: imports tests"]


def private_imports(path: Path) -> list[str]:
    """``module: name`` for each private name ``path`` imports from another perfkit module."""
    return [f"{node.module}: {a.name}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("perfkit")
            for a in node.names if a.name.startswith("_") and a.name != "__version__"]


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_name_is_imported_across_modules(path):
    found = private_imports(path)
    assert not found, f"{path.name} imports private names of other modules {found}: make them public"


def test_private_import_check_finds_a_planted_one(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text("from perfkit.hw import _dtype\nfrom perfkit import __version__\n")
    assert private_imports(planted) == ["perfkit.hw: _dtype"]


def quantile_calls(path: Path) -> list[str]:
    """Calls that compute quantiles outside perfkit.stats (``np.quantile``, ``torch.quantile``,
    ``statistics.quantiles``, ``np.percentile``, ...)."""
    names = {"quantile", "quantiles", "percentile", "nanquantile", "nanpercentile"}
    libs = {"np", "numpy", "torch", "statistics"}
    return [f"line {n.lineno}: {n.func.value.id}.{n.func.attr}" for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in names
            and isinstance(n.func.value, ast.Name) and n.func.value.id in libs]


@pytest.mark.parametrize("path", [p for p in modules() if p.name != "stats.py"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_quantiles_and_intervals_come_from_perfkit_stats(path):
    found = quantile_calls(path)
    assert not found, f"{path.name} computes its own quantiles {found}: use perfkit.stats"


def test_quantile_check_finds_a_planted_one(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text("import numpy as np\nlo = np.quantile(xs, 0.05)\nm.quantile(0.5)\n")
    assert quantile_calls(planted) == ["line 2: np.quantile"]
