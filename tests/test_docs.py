"""The documentation's link checker (docs/check_links.py) and the tables the guide pages copy
from the README."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")


def load_checker():
    """docs/check_links.py as a module (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("check_links", ROOT / "docs" / "check_links.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building classes
    spec.loader.exec_module(module)
    return module


check_links = load_checker()


def write_site(root: Path) -> Path:
    """A tiny built site: an index, a page with anchors, a folder page, an image, and links
    of every kind, three of them broken."""
    (root / "sub").mkdir(parents=True)
    (root / "img.png").write_bytes(b"\x89PNG")
    (root / "index.html").write_text(
        """<html><head><link rel="stylesheet" href="style.css?v=1"></head><body id="top">
        <a href="page.html">a page</a>
        <a href="page.html#section">an anchor there</a>
        <a href="page.html#nowhere">a missing anchor</a>
        <a href="missing.html">a missing page</a>
        <a href="sub/">a folder</a>
        <a href="#top">this page's top</a> <a href="#">the top</a>
        <a href="https://example.org/gone.html">external</a> <a href="mailto:x@example.org">mail</a>
        <img src="img.png"> <img src="lost.png">
        </body></html>"""
    )
    (root / "style.css").write_text("body {}")
    (root / "page.html").write_text(
        """<html><body><h1 id="section">Section</h1><a name="old-anchor"></a>
        <a href="index.html#top">back</a> <a href="page.html#old-anchor">named</a></body></html>"""
    )
    (root / "sub" / "index.html").write_text('<html><body><a href="../page.html#section">up</a></body>')
    return root


def test_parse_page_collects_links_resources_and_anchors() -> None:
    """Links come from <a>/<area>, resources from <img>/<script>/<link>, anchors from ids and
    <a name>; entities are decoded and preconnect hints are not files."""
    page = check_links.parse_page(
        '<div id="a"><a href="x.html?q=1&amp;r=2#b" name="n">x</a><area href="y.html">'
        '<img src="i.png"/><script src="s.js"></script><link rel="preconnect" href="https://cdn">'
        '<link rel="stylesheet" href="c.css"></div>'
    )
    assert page.links == ["x.html?q=1&r=2#b", "y.html"]
    assert page.resources == ["i.png", "s.js", "c.css"]
    assert page.anchors == {"a", "n"}


def test_resolve_internal_external_and_outside(tmp_path: Path) -> None:
    """A relative link names a file under the site (a folder means its index.html), an
    absolute URL is external (None), and a file outside the site is an error message."""
    root = tmp_path / "html"
    (root / "sub").mkdir(parents=True)
    page = root / "index.html"
    assert check_links.resolve("sub/", page, root) == check_links.Target(root / "sub" / "index.html", None)
    assert check_links.resolve("a%20b.html#x%2Dy", page, root) == check_links.Target(root / "a b.html", "x-y")
    assert check_links.resolve("#", page, root) == check_links.Target(page, "")
    assert check_links.resolve("https://example.org/", page, root) is None
    assert check_links.resolve("mailto:x@example.org", page, root) is None
    assert "leaves the built site" in check_links.resolve("../README.md", page, root)


def test_crawl_reports_exactly_the_broken_links(tmp_path: Path) -> None:
    """On the tiny site the missing page, the missing anchor and the missing image are
    reported, nothing else; every page is read once and external links are not followed."""
    root = write_site(tmp_path / "html")
    opened: list[Path] = []

    def fetch(path: Path) -> str:
        opened.append(path)
        return check_links.read_file(path)

    report = check_links.crawl(root, fetch, jobs=2)
    assert report.broken == [
        ("index.html", "lost.png", "lost.png does not exist"),
        ("index.html", "missing.html", "missing.html does not exist"),
        ("index.html", "page.html#nowhere", "no anchor #nowhere in page.html"),
    ]
    assert sorted(opened) == sorted([root / "index.html", root / "page.html", root / "sub" / "index.html"])
    assert report.pages == 3


def test_a_page_that_cannot_be_opened_is_reported(tmp_path: Path) -> None:
    """A fetch that fails names the page and its error instead of stopping the crawl."""
    root = write_site(tmp_path / "html")

    def fetch(path: Path) -> str:
        if path.name == "page.html":
            raise RuntimeError("browser crashed")
        return check_links.read_file(path)

    report = check_links.crawl(root, fetch)
    assert ("page.html", "", "could not be opened: browser crashed") in report.broken


def test_main_exit_status_and_listing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without a browser, main lists the broken links and exits 1; on a sound site it exits 0;
    without a built site it exits 2."""
    root = write_site(tmp_path / "html")
    assert check_links.main([str(root), "--no-browser"]) == 1
    out = capsys.readouterr().out
    assert "index.html: 'missing.html' missing.html does not exist" in out
    assert "3 broken" in out
    sound = tmp_path / "sound"
    sound.mkdir()
    (sound / "index.html").write_text('<html><body id="x"><a href="#x">x</a></body></html>')
    assert check_links.main([str(sound), "--no-browser"]) == 0
    assert check_links.main([str(tmp_path / "nothing"), "--no-browser"]) == 2


@pytest.mark.skipif(not CHROMIUM.is_file(), reason="needs Debian's headless Chromium at /usr/bin/chromium")
def test_chromium_checks_links_that_scripts_add(tmp_path: Path) -> None:
    """In headless Chromium the checker sees the rendered DOM: a link a script adds is
    checked (and found broken), and an anchor a script adds counts."""
    root = write_site(tmp_path / "html")
    (root / "page.html").write_text(
        """<html><body><h1 id="section">Section</h1><a name="old-anchor"></a>
        <script>
          const a = document.createElement("a"); a.href = "added-by-script.html"; document.body.append(a);
          const h = document.createElement("h2"); h.id = "nowhere"; document.body.append(h);
        </script></body></html>"""
    )
    report = check_links.crawl(root, check_links.chromium_fetcher(str(CHROMIUM)), jobs=2)
    assert report.broken == [
        ("index.html", "lost.png", "lost.png does not exist"),
        ("index.html", "missing.html", "missing.html does not exist"),
        ("page.html", "added-by-script.html", "added-by-script.html does not exist"),
    ]


def table_rows(text: str) -> list[str]:
    """The rows of every Markdown table in ``text``, stripped of indentation."""
    return [line.strip() for line in text.splitlines() if re.match(r"\s*\|.*\|\s*$", line)]


def test_guide_tables_are_the_readme_tables() -> None:
    """Every table row on a guide page (docs/*.md) but the index's appears in README.md as
    it is, so the figures the documentation shows are the README's: a re-measured figure
    goes into both."""
    readme = set(table_rows((ROOT / "README.md").read_text()))
    pages = sorted(path for path in (ROOT / "docs").glob("*.md") if path.name != "index.md")
    assert pages, "no guide pages under docs/"
    stale = [
        f"{path.name}: {row}" for path in pages for row in table_rows(path.read_text()) if row not in readme
    ]
    assert not stale, "table rows not in README.md (update the page from the README):\n" + "\n".join(stale)


def test_every_notebook_is_in_the_documentation() -> None:
    """The notebooks page takes notebooks/*.ipynb by glob through the docs/notebooks link, so
    a new notebook appears without editing the documentation."""
    link = ROOT / "docs" / "notebooks"
    assert link.is_symlink() and link.resolve() == (ROOT / "notebooks").resolve()
    assert "notebooks/*" in (ROOT / "docs" / "index.md").read_text()
