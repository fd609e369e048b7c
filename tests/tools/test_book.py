"""tools.book: the course as a Jupyter Book, built from small fixture notebooks (one build of
a four-module course, about 5 s; one more for the warning check). The real site, built from
the QUICK run by `make site`, is driven in Chromium by tests/browser/test_browser.py."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tools import book, book_pages
from tools.book_check import check_site, page_refs

ROOT = Path(__file__).resolve().parents[2]
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
UNIQUE = "zanzibarite"  # a word only 00_alpha uses
SYLLABUS = """# Syllabus

Intro to the syllabus.

| # | module | notebook | lab | time | status |
|---|---|---|---|---|---|
| 00 | Alpha `first` | `00_alpha` | lab 00: the alpha lab | 45 min | ready |
| 01 | Beta | `01_beta` | - | 60 min | ready |
| 02 | Gamma | `02_gamma` | (lab 00) | 30 min | ready |
| 03 | Delta | `03_delta` | - | 30 min | planned |

## 00 · Alpha

*Prerequisites: none.* Why alpha comes first.

## 02 · Gamma

*Prerequisites: 00, 01.* Uses `code`.
"""
README = """# perfkit

## Working through the course

Run `make lab`, then grade with `make grade` ([the rules](CONTRIBUTING.md)).

### Labs

Complete the functions.

## Something else

Not on the page.
"""
PAPERMILL_BANNER = ('<span style="color:red; font-size:2em;">An Exception was encountered at '
                    '\'<a href="#papermill-error-cell">In [2]</a>\'.</span>')
PAPERMILL_MARK = ('<span id="papermill-error-cell" style="color:red;">Execution using papermill '
                  "encountered an exception here and stopped:</span>")
VERDICT = {"outcome": "missed", "level": 0.9, "text": "**Prediction** (copy model): 5 GB/s. "
           "**Measured:** 2 GB/s: missed.", "prediction": {"what": "copy speed"}}


def notebook(cells: list):
    """A notebook with the kernel metadata papermill leaves (the pages' code lexer)."""
    return new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"}})


def executed(title: str, cells: list, duration: float = 12.0, quick: bool = True):
    nb = notebook([new_markdown_cell(f"# {title}\n\nIntro.")] + cells)
    nb.metadata["papermill"] = {"duration": duration, "exception": None,
                                "parameters": {"QUICK": quick}}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return nb


def image(alt: str = "plot"):
    return new_output("display_data", {"image/png": PNG, "text/plain": f"<{alt}>"})


def alpha():
    widget = new_output("display_data", {
        "application/vnd.jupyter.widget-view+json": {"model_id": "abc", "version_major": 2},
        "text/plain": "VBox(children=(IntSlider(value=3),))"})
    verdict = new_output("display_data", {"application/vnd.perfkit.verdict+json": VERDICT,
                                          "text/markdown": VERDICT["text"]})
    heads = new_output("display_data", {
        "application/vnd.perfkit.headline+json": {"copy bandwidth": "2 GB/s", "odd|name": "<b>x</b>"},
        "text/html": "<table><tr><td>copy bandwidth</td></tr></table>"})
    held = dict(VERDICT, outcome="held", text="**Prediction** held.")
    return executed("00 · Alpha", [
        new_markdown_cell(f"## A question\n\nWhere is {UNIQUE} found? A formula: $x^2 + 1$."),
        new_code_cell("plot()", outputs=[image(), new_output("stream", name="stdout", text="hi\n")]),
        new_code_cell("widget()", outputs=[widget]),
        new_code_cell("plot_default()", outputs=[image("default")]),
        new_code_cell("judge()", outputs=[verdict, new_output(
            "display_data", {"application/vnd.perfkit.verdict+json": held, "text/markdown": held["text"]})]),
        new_code_cell("headlines()", outputs=[heads])])


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("course")
    (root / "syllabus.md").write_text(SYLLABUS)
    (root / "README.md").write_text(README)
    for d in ("notebooks/img", "run", "labs"):
        (root / d).mkdir(parents=True)
    (root / "notebooks" / "img" / "diagram.png").write_bytes(base64.b64decode(PNG))
    for stem in ("00_alpha", "01_beta", "02_gamma"):
        nbformat.write(notebook([new_markdown_cell(f"# {stem}"), new_code_cell("x = 1")]),
                       root / "notebooks" / f"{stem}.ipynb")
    nbformat.write(alpha(), root / "run" / "00_alpha.ipynb")
    failed = new_output("error", ename="ValueError", evalue="boom `here`", traceback=["Trace", "ValueError"])
    beta = executed("01 · Beta", [new_markdown_cell(PAPERMILL_MARK),
                                  new_code_cell("x()", outputs=[image(), failed])], 3.0)
    beta.cells.insert(0, new_markdown_cell(PAPERMILL_BANNER))  # what papermill leaves, above the title
    nbformat.write(beta, root / "run" / "01_beta.ipynb")
    # a new notebook the syllabus does not list yet still gets a page, after the others
    nbformat.write(executed("04 · Extra", [new_markdown_cell(
        "See [alpha](00_alpha.ipynb), [the syllabus](../syllabus.md), [its code](../perfkit/dist.py), "
        "[delta](03_delta.ipynb) and ![a diagram](img/diagram.png); `[not](a_link.md)`.")]),
        root / "run" / "04_extra.ipynb")
    nbformat.write(notebook([new_markdown_cell("# Lab 00 · The alpha lab"),
                             new_code_cell("def f():\n    raise NotImplementedError()")]),
                   root / "labs" / "lab00_alpha.ipynb")
    return root


def build(course: Path, out: str = "site") -> book.BookResult:
    return book.build_book(course / out, course / "run", course / "work", course / "notebooks",
                           course / "labs", course / "syllabus.md", course / "README.md")


@pytest.fixture(scope="module")
def site(course: Path) -> Path:
    build(course)
    return course / "site"


def text(site: Path, page: str) -> str:
    return (site / page).read_text(encoding="utf-8")


def visible(markup: str) -> str:
    """What a reader sees of some HTML: no tags, entities decoded, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


def test_index_lists_every_module_in_syllabus_order_with_its_status(site):
    index = text(site, "index.html")
    table = re.search(r'<table class="[^"]*perfkit-modules.*?</table>', index, re.S).group(0)
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)[1:]
    assert [re.search(r"<p>(\d\d)</p>", r).group(1) for r in rows] == ["00", "01", "02", "03", "04"]
    alpha_row, beta, gamma, delta, extra = rows
    assert 'href="notebooks/00_alpha.html"' in alpha_row and "ran here" in alpha_row
    assert "copy bandwidth: <strong>2 GB/s</strong>" in alpha_row and "predictions held: 1 of 2" in alpha_row
    assert "odd|name: <strong>&lt;b&gt;x&lt;/b&gt;</strong>" in alpha_row  # run text is escaped
    assert 'href="labs/lab00_alpha.html"' in alpha_row and "href" not in gamma.split("</td>")[-2]
    assert "failed" in beta and "ValueError: boom `here`" in visible(beta)
    assert "not built" in gamma and "make course" in visible(gamma)
    assert 'href="notebooks/02_gamma.html"' in gamma
    assert "planned" in delta and "href" not in delta
    assert 'href="notebooks/04_extra.html"' in extra


def test_sidebar_follows_the_syllabus_then_labs_then_the_scorecard(site):
    nav = re.search(r'<nav class="[^"]*bd-docs-nav.*?</nav>', text(site, "index.html"), re.S).group(0)
    assert re.findall(r'href="([^"#]+)"', nav) == [
        "working_through_the_course.html", "notebooks/00_alpha.html", "notebooks/01_beta.html",
        "notebooks/02_gamma.html", "notebooks/04_extra.html", "labs/lab00_alpha.html",
        "scorecard.html"]


def test_every_internal_link_resolves_and_nothing_comes_from_another_host(site):
    assert check_site(site) == []
    extra = text(site, "notebooks/04_extra.html")
    assert 'href="00_alpha.html"' in extra  # a link between notebooks
    assert 'href="../index.html"' in extra  # the syllabus is the landing page
    # a file the site does not hold, and a planned notebook: their words, no link
    assert "its code" in extra and "dist.py" not in extra and "delta" in extra and "03_delta" not in extra
    assert "[not](a_link.md)" in visible(extra)  # code stays as written
    assert "Syllabus" in text(site, "index.html") and "Why alpha comes first" in text(site, "index.html")


def test_every_notebook_page_has_its_figures(site, course):
    for stem, expected in (("00_alpha", 2), ("01_beta", 1), ("02_gamma", 0), ("04_extra", 0)):
        run = course / "run" / f"{stem}.ipynb"
        nb = nbformat.read(run if run.exists() else course / "notebooks" / f"{stem}.ipynb", as_version=4)
        images = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
        assert images == expected
        expected += stem == "04_extra"  # its Markdown shows a picture from the repository
        assert page_refs(site / "notebooks" / f"{stem}.html").images == expected, stem


def test_widgets_leave_a_note_not_a_blank_area(site):
    page = text(site, "notebooks/00_alpha.html")
    assert "Interactive widget: it needs a live kernel" in page
    assert "widget-view" not in page and "widget-state" not in page and "VBox(" not in page
    assert "application/vnd.perfkit" not in page and "skipping unknown" not in page


def test_math_is_rendered_by_a_local_mathjax(site):
    page = text(site, "notebooks/00_alpha.html")
    scripts = page_refs(site / "notebooks" / "00_alpha.html").resources
    mathjax = [s for s in scripts if "mathjax" in s.lower()]
    assert mathjax == ["../_static/mathjax/tex-chtml.js"], scripts
    assert (site / "_static" / "mathjax" / "tex-chtml.js").stat().st_size > 100_000
    assert r"\(x^2 + 1\)" in page


def test_search_index_maps_a_word_to_the_one_page_that_uses_it(site):
    from sphinx.search.en import SearchEnglish

    raw = text(site, "searchindex.js")
    index = json.loads(raw[raw.index("(") + 1:raw.rindex(")")])
    stem = SearchEnglish({}).stem(UNIQUE)
    docs = index["terms"][stem]
    pages = [index["docnames"][d] for d in ([docs] if isinstance(docs, int) else docs)]
    assert pages == ["notebooks/00_alpha"]


def test_pages_say_how_their_run_went(site):
    assert "ran here in 12 s (QUICK sizes)" in text(site, "notebooks/00_alpha.html")
    beta = visible(text(site, "notebooks/01_beta.html"))
    assert "This notebook failed here" in beta and "ValueError: boom `here`" in beta
    assert "An Exception was encountered" not in beta  # the note, under the title, says it
    assert 'href="#papermill-error-cell">the failing one' in text(site, "notebooks/01_beta.html")
    assert "Not built on this machine" in visible(text(site, "notebooks/02_gamma.html"))


def test_labs_scorecard_and_readme_section_are_pages(site):
    lab = visible(text(site, "labs/lab00_alpha.html"))
    assert "NotImplementedError" in lab and "make grade LAB=labs/lab00_alpha.ipynb" in lab
    card = text(site, "scorecard.html")
    rows = {visible(r).split(" ")[0]: visible(r) for r in re.findall(r"<tr[^>]*>(.*?)</tr>", card, re.S)}
    assert rows["00_alpha"] == "00_alpha 1 1 0 0 ran here in 12 s (QUICK sizes)"
    assert rows["01_beta"] == "01_beta 0 0 0 0 failed here after 3 s (QUICK sizes)"
    assert rows["all"] == "all lectures 1 1 0 0" and "02_gamma" not in rows
    assert "2 GB/s: missed" in card and "Prediction</strong> held" not in card
    working = text(site, "working_through_the_course.html")
    assert "<h1>Working through the course" in working and "Complete the functions" in working
    assert "the rules" in working and "CONTRIBUTING" not in working
    assert "Not on the page" not in working


def test_a_sphinx_warning_fails_the_build(course, tmp_path):
    broken = alpha()
    broken.cells.append(new_markdown_cell("A reference to {doc}`no_such_page`."))
    nbformat.write(broken, course / "run" / "00_alpha.ipynb")
    try:
        with pytest.raises(book.BookError, match="no_such_page"):
            build(course, "site-broken")
    finally:
        nbformat.write(alpha(), course / "run" / "00_alpha.ipynb")


def test_no_notebooks_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="run `make course`"):
        book.build_book(tmp_path / "site", tmp_path, tmp_path / "work", tmp_path)
    assert book.main(["--notebooks", str(tmp_path), "--sources", str(tmp_path),
                      "--out", str(tmp_path / "site")]) == 2
    assert "make course" in capsys.readouterr().err


def test_check_site_finds_planted_breakage(tmp_path):
    pages = {"index.html": '<a href="good.html#top">ok</a> <a href="gone.html">gone</a>'
                           '<script src="https://cdn.example.org/mathjax.js"></script>'
                           '<a href="https://example.org/">a reader may follow this</a>',
             "sub/good.html": "", "good.html": '<h1 id="top">t</h1><a href="#nowhere">x</a>'
                                               '<img src="missing.png"><a href="../outside.html">o</a>'}
    for name, body in pages.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(f"<html><body>{body}</body></html>")
    assert check_site(tmp_path) == [
        "good.html: link ../outside.html points outside the site",
        "good.html: link to #nowhere: no element with that id",
        "good.html: resource missing.png: no such file",
        "index.html: link gone.html: no such file",
        "index.html: loads https://cdn.example.org/mathjax.js from another host (offline it fails)"]
    with pytest.raises(FileNotFoundError, match="make site"):
        check_site(tmp_path / "sub")


def test_reads_the_real_syllabus_in_order():
    modules = book_pages.read_syllabus(ROOT / "syllabus.md")
    assert [m.number for m in modules][:10] == [f"{i:02d}" for i in range(10)]
    assert modules[0].notebook == "00_measure_your_machine" and modules[0].prerequisites == "none"


def test_a_syllabus_without_a_table_is_a_clear_error(tmp_path):
    (tmp_path / "s.md").write_text("# nothing here\n")
    with pytest.raises(ValueError, match="no module table"):
        book_pages.read_syllabus(tmp_path / "s.md")
    (tmp_path / "r.md").write_text("# readme\n")
    with pytest.raises(ValueError, match="Working through"):
        book_pages.readme_section(tmp_path / "r.md", "Working through the course")


def test_markdown_helpers_keep_run_text_literal():
    assert book_pages.md_escape("a*b_c [x](y) <b> $1 | 2") == r"a\*b\_c \[x\](y) \<b\> \$1 \| 2"
    assert book_pages.md_code("x`y") == "``x`y``" and book_pages.md_code("`a`") == "`` `a` ``"
    assert book_pages.shift_headings("# A\n```\n# not a heading\n```\n## B", 1) == \
        "## A\n```\n# not a heading\n```\n### B\n"
