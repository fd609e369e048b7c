"""Check a built static site offline: every internal link, anchor and resource resolves, and
nothing is loaded from another host.

    problems = check_site(Path("build/site"))       # [] when every link resolves
    for line in problems: print(line)
    # e.g. "notebooks/00_x.html: link to ../scorecard.html#nowhere: no element with that id"

A link to another site (``https://...``) is a reader's choice and is not followed; a script,
style sheet, image or font from another host is a problem, since the site must work
without a network (MathJax from a CDN would leave formulas as raw TeX). The browser test
follows the same links in Chromium; this check needs no browser, so ``make site`` runs it.
"""

from __future__ import annotations

import html.parser
import posixpath
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

_RESOURCE_ATTRS = {("script", "src"), ("img", "src"), ("link", "href"), ("source", "src"),
                   ("iframe", "src"), ("video", "src"), ("audio", "src")}


@dataclass
class PageRefs:
    """What one HTML page points at, and the anchors it defines."""

    links: list[str] = field(default_factory=list)  # <a href>
    resources: list[str] = field(default_factory=list)  # src/href that the page loads
    ids: set[str] = field(default_factory=set)
    images: int = 0


class _Collector(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.refs = PageRefs()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v for k, v in attrs if v is not None}
        for key in ("id", "name") if tag == "a" else ("id",):
            if values.get(key):
                self.refs.ids.add(values[key])
        if tag == "img":
            self.refs.images += 1
        if tag == "a" and "href" in values:
            self.refs.links.append(values["href"])
        for t, attr in _RESOURCE_ATTRS:
            # <link rel="canonical|prev|next"> are links, not resources the page loads
            if tag == t and attr in values and not (
                    tag == "link" and values.get("rel") not in ("stylesheet", "preload", "icon")):
                self.refs.resources.append(values[attr])


def page_refs(path: Path) -> PageRefs:
    """The links, loaded resources, anchors and image count of one HTML file."""
    parser = _Collector()
    parser.feed(Path(path).read_text(encoding="utf-8", errors="replace"))
    parser.close()
    return parser.refs


def _is_external(url: str) -> bool:
    scheme = urllib.parse.urlsplit(url).scheme
    return bool(scheme) or url.startswith("//")


def check_site(site: Path) -> list[str]:
    """Every problem with the site's internal links and resources, one line each.

    A problem is: a link or resource whose file does not exist, a fragment that names no
    element of its target page, or a resource (script, style, image) loaded from another
    host. ``mailto:``, ``data:`` and ``javascript:`` URLs are skipped.

    Args:
        site: the folder of the built site (``index.html`` at its top).

    Raises:
        FileNotFoundError: ``site`` has no ``index.html``.
    """
    site = Path(site)
    if not (site / "index.html").is_file():
        raise FileNotFoundError(f"{site} has no index.html: build the site first (make site)")
    # _static/ holds the theme's Jinja templates (copied as they are), not pages
    pages = {p.relative_to(site).as_posix(): page_refs(p) for p in sorted(site.rglob("*.html"))
             if not p.relative_to(site).as_posix().startswith("_static/")}
    problems: list[str] = []
    for name, refs in pages.items():
        here = posixpath.dirname(name)
        for kind, urls in (("link", refs.links), ("resource", refs.resources)):
            for url in urls:
                if url.startswith(("mailto:", "data:", "javascript:")):
                    continue
                if _is_external(url):
                    if kind == "resource":
                        problems.append(f"{name}: loads {url} from another host (offline it fails)")
                    continue
                parts = urllib.parse.urlsplit(url)
                target = posixpath.normpath(posixpath.join(here, urllib.parse.unquote(parts.path))) \
                    if parts.path else name
                if target.startswith("../"):
                    problems.append(f"{name}: {kind} {url} points outside the site")
                    continue
                if not (site / target).exists():
                    problems.append(f"{name}: {kind} {url}: no such file")
                    continue
                frag = urllib.parse.unquote(parts.fragment)
                if frag and target in pages and frag not in pages[target].ids:
                    problems.append(f"{name}: link to {url}: no element with that id")
    return sorted(set(problems))
