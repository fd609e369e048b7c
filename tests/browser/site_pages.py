"""Drive the course book (``make site``) in the browser tests: its sidebar, its search box,
and the facts a page should match (figures of the executed notebook, a word only one
lecture uses).

    with serve(ROOT / "build" / "site") as base:
        page.goto(base + "index.html"); links = sidebar_links(page)
        found = search(page, base + "index.html", unique_word(ROOT / "build" / "book" / "src")[0])
"""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import nbformat
from browser_harness import free_port

SEARCH_TIMEOUT_MS = 30_000
# Images of the page's article only (not the theme's logo), and whether each one loaded.
IMAGES_JS = """async () => {
  const imgs = [...document.querySelectorAll('article img')];
  await Promise.race([Promise.all(imgs.map(i => i.complete ? null : new Promise(r => {
    i.addEventListener('load', r); i.addEventListener('error', r); }))),
    new Promise(r => setTimeout(r, 10000))]);
  return {count: imgs.length,
          broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 100))};
}"""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve ``folder`` over HTTP on 127.0.0.1 for a ``with`` block, as ``python -m
    http.server`` does for a reader; yields the base URL."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()),
                                            partial(_QuietHandler, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def sidebar_links(page: Any) -> list[str]:
    """The absolute URLs of the book's sidebar (its table of contents), in order."""
    return page.eval_on_selector_all("nav.bd-docs-nav a.reference.internal", "as => as.map(a => a.href)")


def page_images(page: Any) -> dict:
    """``{"count": n, "broken": [src, ...]}`` for the images of the loaded page's article."""
    return page.evaluate(IMAGES_JS)


def search(page: Any, start: str, word: str) -> list[str]:
    """Open ``start``, type ``word`` into its search box as a reader does (the sidebar's search
    button, then Enter) and return the result links once Sphinx's search has finished."""
    page.goto(start)
    page.click(".bd-sidebar-primary .search-button-field")
    box = page.locator("#pst-search-dialog input[name=q]")
    box.fill(word)
    box.press("Enter")
    page.wait_for_url(re.compile(r"search\.html\?q="), timeout=SEARCH_TIMEOUT_MS)
    # Sphinx's last words: "Search finished, found N page(s)" or "...did not match any documents"
    page.wait_for_function("() => /Search finished|did not match/.test("
                           "(document.querySelector('#search-results') || {}).innerText || '')",
                           timeout=SEARCH_TIMEOUT_MS)
    return page.eval_on_selector_all("#search-results ul.search li a", "as => as.map(a => a.href)")


def figures(path: Path) -> int:
    """How many pictures a notebook shows: its image outputs (PNG, JPEG, SVG) and the images
    of its Markdown cells."""
    nb = nbformat.read(path, as_version=4)
    outputs = sum(any(k.startswith("image/") for k in out.get("data", {}))
                  for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", []))
    return outputs + sum(len(re.findall(r"!\[[^\]]*\]\(", cell.source))
                         for cell in nb.cells if cell.cell_type == "markdown")


def unique_word(src: Path) -> tuple[str, str]:
    """A word of a lecture's prose that no other page of the book uses, and that lecture's stem.

    Args:
        src: the book's staged sources (``build/book/src``: ``notebooks/``, ``labs/``, pages).

    Raises:
        LookupError: every prose word of every lecture also appears elsewhere.
    """
    docs = {p: p.read_text(encoding="utf-8").lower() for p in sorted(src.rglob("*"))
            if p.suffix in (".md", ".ipynb") and "_build" not in p.parts}
    for lecture in sorted(src.glob("notebooks/*.ipynb")):
        prose = " ".join("".join(c["source"]) for c in json.loads(docs[lecture])["cells"]
                         if c["cell_type"] == "markdown")  # a cell's source is saved as lines
        for word in sorted(set(re.findall(r"\b[a-z]{8,}\b", prose))):
            if sum(word in text for text in docs.values()) == 1:
                return word, lecture.stem
    raise LookupError(f"no lecture in {src} uses a word that no other page uses")
