"""Check every internal link of the built HTML documentation in a headless browser.

Starting at ``index.html``, each page reachable through internal links is opened once in
Debian's headless Chromium, which runs the page's scripts and prints the rendered DOM
(``--dump-dom``). Every link in that DOM (``<a href>``, ``<area href>``) and every resource
it loads (``<img src>``, ``<script src>``, ``<link href>``) is resolved against the page:

* a link to another page of the site must name a file that exists; an HTML page is then
  opened in its turn, and its ids and ``<a name>`` anchors recorded;
* a link with a ``#fragment`` must name an anchor present in the rendered target page
  (an empty fragment, ``#``, is the top of the page);
* a link that leaves the built site (another scheme, ``http(s)``, ``mailto``, or a file
  outside the build directory) is not followed; a ``file:`` link outside it is reported,
  since it will not exist once the site is published.

Usage::

    python docs/check_links.py [BUILD_DIR] [--chromium PATH] [--jobs N] [--no-browser]

``BUILD_DIR`` defaults to ``docs/_build/html``. With ``--no-browser`` the static HTML files
are read instead of the rendered DOM (for machines without Chromium). Exit status: 0 when
every link resolves, 1 with the broken links listed, 2 when the check could not run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
# Attributes that link (followed) and that load a resource (checked to exist, not followed).
LINK_ATTRIBUTES = {"a": "href", "area": "href"}
RESOURCE_ATTRIBUTES = {"img": "src", "script": "src", "link": "href", "iframe": "src"}
# <link rel=...> values that name no file to load
NON_FILE_RELS = {"dns-prefetch", "preconnect"}


@dataclass
class Page:
    """What a page's rendered DOM holds: its links and resources (as written) and anchors."""

    links: list[str] = field(default_factory=list)
    resources: list[str] = field(default_factory=list)
    anchors: set[str] = field(default_factory=set)


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value for name, value in attrs if value is not None}
        if "id" in values:
            self.page.anchors.add(values["id"])
        if tag == "a" and "name" in values:
            self.page.anchors.add(values["name"])
        if tag in LINK_ATTRIBUTES and LINK_ATTRIBUTES[tag] in values:
            self.page.links.append(values[LINK_ATTRIBUTES[tag]])
        elif tag in RESOURCE_ATTRIBUTES and RESOURCE_ATTRIBUTES[tag] in values:
            if tag == "link" and set(values.get("rel", "").split()) & NON_FILE_RELS:
                return
            self.page.resources.append(values[RESOURCE_ATTRIBUTES[tag]])

    handle_startendtag = handle_starttag


def parse_page(html: str) -> Page:
    """The links, resources and anchors of one page's HTML text."""
    collector = _Collector()
    collector.feed(html)
    collector.close()
    return collector.page


@dataclass(frozen=True)
class Target:
    """An internal link resolved: the file it names (absolute) and its fragment (or None)."""

    path: Path
    fragment: str | None


def resolve(link: str, page: Path, root: Path) -> Target | str | None:
    """Resolve ``link`` found on ``page`` (a file under ``root``, the build directory).

    Returns the :class:`Target` of an internal link, None for an external one (not
    followed), or a message for a link that cannot be right (a file outside the site).
    """
    link = link.strip()
    if not link:
        return Target(page, None)  # href="": this page
    url = urljoin(page.as_uri(), link)
    scheme = urlsplit(url).scheme
    if scheme != "file":
        return None  # http(s), mailto, javascript, data, ...: not followed
    without_fragment, fragment = urldefrag(url)
    parts = urlsplit(without_fragment)
    path = Path(unquote(parts.path))
    if not path.is_relative_to(root):
        return f"leaves the built site ({path})"
    if path.is_dir() or parts.path.endswith("/"):
        path = path / "index.html"
    has_fragment = "#" in link
    return Target(path, unquote(fragment) if has_fragment else None)


@dataclass
class Report:
    """The result of a crawl: broken links (page, link, reason), pages and links checked."""

    broken: list[tuple[str, str, str]]
    pages: int
    links: int


def crawl(root: Path, fetch: Callable[[Path], str], start: str = "index.html", jobs: int = 1) -> Report:
    """Open every page reachable from ``root/start`` once with ``fetch`` (a page's file to
    its rendered HTML), and check each link and resource it holds.

    ``fetch`` runs on up to ``jobs`` pages at once (threads); a page it cannot open is
    reported once, with its error, and not searched for links.
    """
    root = root.resolve()
    first = (root / start).resolve()
    if not first.is_file():
        raise FileNotFoundError(f"{first} does not exist; build the documentation first")
    pages: dict[Path, Page] = {}
    failed: dict[Path, str] = {}
    # (page, link as written, target) of every internal link, checked once all pages are in
    found: list[tuple[Path, str, Target | str, bool]] = []
    scheduled = {first}

    def is_page(path: Path) -> bool:
        return path.suffix in (".html", ".htm") and path.is_file()

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        pending: dict[Future[str], Path] = {pool.submit(fetch, first): first}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                path = pending.pop(future)
                try:
                    page = parse_page(future.result())
                except Exception as error:  # reported below, with the page it concerns
                    failed[path] = f"could not be opened: {error}"
                    continue
                pages[path] = page
                for link, is_link in [(link, True) for link in page.links] + [
                    (resource, False) for resource in page.resources
                ]:
                    target = resolve(link, path, root)
                    if target is None:
                        continue
                    found.append((path, link, target, is_link))
                    if (
                        is_link
                        and isinstance(target, Target)
                        and target.path not in scheduled
                        and is_page(target.path)
                    ):
                        scheduled.add(target.path)
                        pending[pool.submit(fetch, target.path)] = target.path

    broken: list[tuple[str, str, str]] = []

    def name(path: Path) -> str:
        return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)

    for path, reason in sorted(failed.items()):
        broken.append((name(path), "", reason))
    for path, link, target, _ in found:
        if isinstance(target, str):
            broken.append((name(path), link, target))
        elif not target.path.exists():
            broken.append((name(path), link, f"{name(target.path)} does not exist"))
        elif target.fragment and target.path in pages and target.fragment not in pages[target.path].anchors:
            broken.append((name(path), link, f"no anchor #{target.fragment} in {name(target.path)}"))
    return Report(sorted(set(broken)), len(pages), len(found))


def read_file(path: Path) -> str:
    """A page's HTML as stored (no browser)."""
    return path.read_text(encoding="utf-8", errors="replace")


def chromium_fetcher(chromium: str, timeout: float = 60.0, tries: int = 2) -> Callable[[Path], str]:
    """A ``fetch`` that opens a page in headless Chromium and returns its rendered DOM.

    Each call runs its own browser with a fresh profile directory (removed afterwards), so
    calls may run in parallel; a call that fails or times out is tried again once.
    """

    def fetch(path: Path) -> str:
        error = ""
        for _ in range(tries):
            profile = tempfile.mkdtemp(prefix="check-links-")
            try:
                run = subprocess.run(
                    [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", path.as_uri()],
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    check=False,
                )
                if run.returncode == 0 and "<html" in run.stdout.lower():
                    return run.stdout
                error = f"chromium exited with status {run.returncode}: {run.stderr.strip()[-300:]}"
            except subprocess.TimeoutExpired:
                error = f"chromium took more than {timeout:g} s"
            finally:
                shutil.rmtree(profile, ignore_errors=True)
        raise RuntimeError(error)

    return fetch


def format_report(report: Report) -> Iterable[str]:
    """The lines printed for ``report``."""
    for page, link, reason in report.broken:
        yield f"{page}: {link!r} {reason}" if link else f"{page}: {reason}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_root = Path(__file__).resolve().parent / "_build" / "html"
    parser.add_argument("root", nargs="?", type=Path, default=default_root, help="the built HTML")
    parser.add_argument("--chromium", default=CHROMIUM, help=f"the browser (default: {CHROMIUM})")
    parser.add_argument("--jobs", type=int, default=max(2, min(8, 2 * (os.cpu_count() or 1))))
    parser.add_argument("--no-browser", action="store_true", help="read the static HTML instead")
    args = parser.parse_args(argv)

    if args.no_browser:
        fetch, how = read_file, "static HTML (no browser)"
    else:
        if shutil.which(args.chromium) is None:
            print(f"check_links: {args.chromium} not found; install Chromium or pass --no-browser")
            return 2
        fetch, how = chromium_fetcher(args.chromium), f"rendered by {args.chromium}"
    started = time.perf_counter()
    try:
        report = crawl(args.root, fetch, jobs=args.jobs)
    except FileNotFoundError as error:
        print(f"check_links: {error}")
        return 2
    seconds = time.perf_counter() - started
    for line in format_report(report):
        print(line)
    verdict = f"{len(report.broken)} broken" if report.broken else "all resolve"
    print(
        f"check_links: {report.pages} pages, {report.links} internal links and resources, {how}, "
        f"{seconds:.1f} s: {verdict}"
    )
    return 1 if report.broken else 0


if __name__ == "__main__":
    sys.exit(main())
