"""The documentation's link checker (docs/check_links.py), and the README as the front door of the
documentation: its tables come from the docs pages, its links resolve, its layout is the package's."""

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


README = ROOT / "README.md"
DOCS = ROOT / "docs"
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def docs_pages() -> list[Path]:
    """The pages of the documentation written in Markdown (docs/*.md), the index included."""
    pages = sorted(DOCS.glob("*.md"))
    assert pages, "no pages under docs/"
    return pages


def as_on_a_page(row: str) -> str:
    """A README row as a page of docs/ writes it: a link to ``docs/X`` is a link to ``X`` there."""
    return row.replace("](docs/", "](")


def linked_page(row: str) -> Path | None:
    """The one docs page a README row links to, or None when it links to none or to several."""
    links = [target for _, target in LINK.findall(row)]
    pages = {target for target in links if target.startswith("docs/") and target.endswith(".md")}
    return ROOT / pages.pop() if len(pages) == 1 else None


def occurs(number: str, text: str) -> bool:
    """Whether ``number`` is written in ``text`` as a whole figure (0.158 is not in 10.158 or 0.1587)."""
    return re.search(rf"(?<!\d)(?<!\d[.,]){re.escape(number)}(?!\d|[.,]\d)", text) is not None


def test_readme_tables_are_on_the_docs_pages() -> None:
    """Every table row the README shows (headline figures, the GSM8K tables, the map of pages)
    is on a page of docs/ as it is, links to docs/X written as links to X: the pages are the
    home of the figures, and a re-measured figure is changed there first."""
    rows = table_rows(README.read_text(encoding="utf-8"))
    assert rows, "no tables in README.md"
    on_pages = {row for page in docs_pages() for row in table_rows(page.read_text(encoding="utf-8"))}
    missing = [row for row in rows if as_on_a_page(row) not in on_pages]
    assert not missing, "README rows on no docs page (copy them from the page):\n" + "\n".join(missing)


def test_each_readme_row_that_links_a_page_has_its_figures_from_that_page() -> None:
    """A README row that links one page (the headline figures, the map of pages) prints only
    figures that page prints: every number in the row, outside its link targets, is on it."""
    checked = 0
    for row in table_rows(README.read_text(encoding="utf-8")):
        page = linked_page(row)
        if page is None:
            continue
        assert page.is_file(), f"{row!r} links to {page.relative_to(ROOT)}, which does not exist"
        text = page.read_text(encoding="utf-8")
        shown = LINK.sub(lambda link: link.group(1), row)
        missing = [number for number in NUMBER.findall(shown) if not occurs(number, text)]
        assert not missing, f"{page.name} does not print {missing} of the README row {row!r}"
        checked += 1
    assert checked >= len(docs_pages()) - 1, "the README links fewer pages from its tables than docs/ has"


def test_readme_links_name_files_of_the_repository() -> None:
    """Every relative link in README.md names a file or folder of the checkout (GitHub shows
    them as they are), and every page of the documentation is linked from it."""
    targets = [target for _, target in LINK.findall(README.read_text(encoding="utf-8"))]
    relative = [target.split("#")[0] for target in targets if "://" not in target and target[0] != "#"]
    assert relative, "README.md links to nothing"
    assert [target for target in relative if not (ROOT / target).exists()] == []
    pages = {f"docs/{page.name}" for page in docs_pages() if page.name != "index.md"} | {"docs/api.rst"}
    assert sorted(pages - set(relative)) == [], "pages the README's map does not link"


def test_the_readme_quick_start_runs_and_prints_the_baseline_row(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's Python quick start runs as printed (its schedule validates), and the
    makespan it prints is the baseline row of the README's GSM8K table to the printed digit."""
    readme = README.read_text(encoding="utf-8")
    code = readme.split("\n## Quick start\n", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "README.md quick start", "exec"), {"__name__": "readme_quick_start"})
    makespan = float(capsys.readouterr().out.split()[0])
    baseline = next(row for row in table_rows(readme) if row.startswith("| baseline: FCFS, prefill-first |"))
    assert f"{makespan:.2f} s" == baseline.split("|")[3].strip()


def code_block_after(text: str, heading: str) -> list[str]:
    """The lines of the first code block under ``heading`` (a Markdown heading line)."""
    section = text.split(f"\n{heading}\n", 1)[1]
    return section.split("```\n", 1)[1].split("```", 1)[0].splitlines()


def listed_entries(block: list[str]) -> dict[str, set[str]]:
    """The package tree a layout block draws: the entries under ``src/llmsched/`` (indented
    two spaces) as key "", and each folder's own entries (four spaces) under its name."""
    tree: dict[str, set[str]] = {"": set()}
    folder = ""
    for line in block:
        entry = re.match(r"( +)(\S+)", line)
        if entry is None or entry.group(2).startswith(("the ", "and ")) or len(entry.group(1)) > 4:
            continue
        if len(entry.group(1)) == 2:
            folder = entry.group(2)
            tree[""].add(folder)
            tree.setdefault(folder, set())
        else:
            tree[folder].add(entry.group(2))
    return tree


def package_entries(folder: Path) -> set[str]:
    """The modules (``name.py``, dunder files left out) and subpackages (``name/``) of ``folder``."""
    return {
        path.name + "/" if path.is_dir() else path.name
        for path in folder.iterdir()
        if (path.is_dir() and (path / "__init__.py").is_file())
        or (path.suffix == ".py" and not path.name.startswith("__"))
    }


def test_the_readme_layout_draws_the_package_as_it_is() -> None:
    """The README's Layout lists every module and subpackage under src/llmsched/ and nothing
    else, and under each folder it opens, every subpackage of that folder; Getting started
    draws the same tree."""
    src = ROOT / "src" / "llmsched"
    readme = README.read_text(encoding="utf-8")
    block = code_block_after(readme, "## Layout")
    assert block[0] == "src/llmsched/"
    tree = listed_entries(block[1:])
    assert sorted(tree[""] - {"benchmarks/", "docs/", "notebooks/", "tests/"}) == sorted(package_entries(src))
    for folder, entries in tree.items():
        if folder and (src / folder).is_dir():
            subpackages = {entry for entry in package_entries(src / folder) if entry.endswith("/")}
            assert sorted(subpackages - entries) == [], f"{folder} lacks its subpackages"
            assert sorted(entries - package_entries(src / folder)) == [], f"{folder} lists what is not there"
    guide = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    assert code_block_after(guide, "## Where things are") == block


def test_the_layout_page_names_every_module() -> None:
    """docs/layout.md links every module of the package (a file under src/llmsched/ but the
    dunder ones) to its API page, and no module that is not there."""
    src = ROOT / "src" / "llmsched"
    text = (DOCS / "layout.md").read_text(encoding="utf-8")
    named = set(re.findall(r"\{mod\}`(?:[^`<]*<)?(llmsched[\w.]*)>?`", text))
    modules = {
        ".".join(("llmsched", *path.relative_to(src).with_suffix("").parts))
        for path in src.rglob("*.py")
        if not path.name.startswith("__")
    }
    assert sorted(modules - named) == [], "modules docs/layout.md does not name"

    def exists(name: str) -> bool:
        path = src.joinpath(*name.split(".")[1:])
        return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()

    gone = [name for name in sorted(named) if not exists(name)]
    assert gone == [], "docs/layout.md names modules that are gone"


def test_every_notebook_is_in_the_documentation() -> None:
    """The notebooks page takes notebooks/*.ipynb by glob through the docs/notebooks link, so
    a new notebook appears without editing the documentation."""
    link = ROOT / "docs" / "notebooks"
    assert link.is_symlink() and link.resolve() == (ROOT / "notebooks").resolve()
    assert "notebooks/*" in (ROOT / "docs" / "index.md").read_text()


def test_files_the_pages_show_are_in_git() -> None:
    """Every image a documentation page shows by a relative path exists and is tracked by git
    (a pattern in .gitignore must not keep it out), so a clean clone builds the same pages."""
    import subprocess

    referenced: list[Path] = []
    for page in docs_pages():
        for _, target in LINK.findall(page.read_text(encoding="utf-8")):
            path = target.split("#")[0]
            if path and "://" not in path:
                referenced.append((page.parent / path).resolve())
    shown = [path for path in referenced if path.suffix in {".png", ".svg", ".jpg", ".gif"}]
    assert shown, "no page shows an image; the check has nothing to check"
    assert [path for path in shown if not path.is_file()] == []
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    names = [str(path.relative_to(ROOT)) for path in shown]
    tracked = subprocess.run(
        ["git", "ls-files", "--", *names], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert sorted(set(names) - set(tracked)) == [], "images the pages show that git does not track"
