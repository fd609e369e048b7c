"""tools.site: the static course site from rendered notebooks (no browser needed here;
tests/browser/ follows the real site's links in Chromium)."""

import json
import re
from pathlib import Path

import pytest

from tools import site

ROOT = Path(__file__).resolve().parents[2]
SYLLABUS = """# Syllabus

| # | module | notebook | lab | time | status |
|---|---|---|---|---|---|
| 00 | First steps | `00_first` | lab 00 | 45 min | ready |
| 01 | Second | `01_second` | - | 60 min | planned |
| 02 | Third `thing` | `02_third` | (lab 00) | 30 min | planned |

## 00 · First steps

*Prerequisites: none.* Why the first module
comes first.

## 02 · Third `thing`

*Prerequisites: 00, 01.* Uses `code`.
"""


def rendered(stem: str, body: str = "") -> str:
    """A page shaped like nbconvert's: a title, a body with a class, an embedded image."""
    return (f"<!DOCTYPE html><html><head><title>{stem}</title></head>"
            f'<body class="jp-Notebook"><h1 id="top">{stem}</h1>'
            f'<img src="data:image/png;base64,iVBORw0KGgo="/>{body}</body></html>')


@pytest.fixture
def course(tmp_path: Path) -> Path:
    (tmp_path / "syllabus.md").write_text(SYLLABUS)
    (tmp_path / "src").mkdir()
    nb = tmp_path / "nb"
    nb.mkdir()
    (nb / "00_first.html").write_text(rendered(
        "00_first", '<a href="02_third.ipynb#x">next</a> <a href="01_second.ipynb">planned</a>'))
    (nb / "02_third.html").write_text(rendered("02_third"))
    (nb / "summary.json").write_text(json.dumps([
        {"name": "00_first", "status": "ok", "seconds": 12.3, "headlines": {"speed": "5 GB/s"},
         "verdicts": [{"outcome": "held", "prediction": {"what": "copy speed"}},
                      {"outcome": "missed", "prediction": {"what": "matmul <b>speed</b>"}}]},
        {"name": "02_third", "status": "failed", "seconds": 3, "headlines": {},
         "error": "ValueError: boom"}]))
    return tmp_path


def build(course: Path) -> Path:
    return site.build_site(course / "nb", course / "site", course / "syllabus.md", course / "src")


def test_reads_the_real_syllabus_in_order():
    modules = site.read_syllabus(ROOT / "syllabus.md")
    assert [m.number for m in modules] == [f"{i:02d}" for i in range(10)]
    assert modules[0].notebook == "00_measure_your_machine"
    assert modules[0].prerequisites == "none" and modules[0].summary.startswith("Why every result")


def test_reads_multi_line_summaries(course):
    first, second, third = site.read_syllabus(course / "syllabus.md")
    assert first.summary == "Why the first module comes first."
    assert second.summary == "" and third.prerequisites == "00, 01"


def test_index_lists_every_module_in_order_with_ready_ones_linked(course):
    index = build(course).read_text()
    rows = re.findall(r'<tr id="module-(\d\d)">(.*?)</tr>', index, re.DOTALL)
    assert [n for n, _ in rows] == ["00", "01", "02"]
    assert '<a href="00_first.html">First steps</a>' in rows[0][1] and "ready" in rows[0][1]
    assert "speed: 5 GB/s" in rows[0][1] and "ran here in 12 s" in rows[0][1]
    assert "href" not in rows[1][1] and "planned" in rows[1][1]
    assert '<a href="02_third.html">' in rows[2][1] and "ValueError: boom" in rows[2][1]


def test_pages_get_navigation_and_links_between_notebooks(course):
    build(course)
    first = (course / "site" / "00_first.html").read_text()
    third = (course / "site" / "02_third.html").read_text()
    assert first.count('href="index.html"') >= 2  # top and bottom bars
    assert 'rel="next" href="02_third.html"' in first and 'rel="prev"' not in first
    assert 'rel="prev" href="00_first.html"' in third and 'rel="next"' not in third
    assert 'href="02_third.html#x"' in first  # a rendered notebook: its page
    assert 'href="index.html#module-01"' in first  # a planned one: its line on the index
    assert "<title>00 · First steps · " in first
    assert 'data:image/png' in first


def test_a_notebook_missing_from_the_syllabus_still_gets_a_page(course):
    (course / "nb" / "07_extra_topic.html").write_text(rendered("07_extra_topic"))
    index = build(course).read_text()
    assert '<a href="07_extra_topic.html">extra topic</a>' in index


def test_written_but_not_built_is_not_called_planned(course):
    (course / "src" / "01_second.ipynb").write_text("{}")
    index = build(course).read_text()
    row = re.search(r'<tr id="module-01">(.*?)</tr>', index, re.DOTALL).group(1)
    assert "not built" in row and "make course" in row


def test_stale_pages_are_removed(course):
    (course / "site").mkdir()
    (course / "site" / "05_old.html").write_text("old")
    build(course)
    assert not (course / "site" / "05_old.html").exists()


def test_relative_images_are_copied(course):
    (course / "src" / "img").mkdir()
    (course / "src" / "img" / "diagram.png").write_bytes(b"\x89PNG")
    (course / "nb" / "02_third.html").write_text(rendered("02_third", '<img src="img/diagram.png">'))
    build(course)
    assert (course / "site" / "img" / "diagram.png").read_bytes() == b"\x89PNG"


def test_no_rendered_notebooks_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="run `make course`"):
        site.build_site(tmp_path, tmp_path / "site")
    assert site.main(["--notebooks", str(tmp_path), "--out", str(tmp_path / "site")]) == 2
    assert "make course" in capsys.readouterr().err


def test_a_syllabus_without_a_table_is_a_clear_error(tmp_path):
    (tmp_path / "s.md").write_text("# nothing here\n")
    with pytest.raises(ValueError, match="no module table"):
        site.read_syllabus(tmp_path / "s.md")


def test_index_shows_each_notebooks_scorecard(course):
    index = build(course).read_text()
    row = re.search(r'<tr id="module-00">(.*?)</tr>', index, re.DOTALL).group(1)
    assert "predictions held: 1 of 2" in row
    assert "missed: matmul &lt;b&gt;speed&lt;/b&gt;" in row and "copy speed" not in row
