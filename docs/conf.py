"""Sphinx configuration: the guide pages, the notebooks with their stored outputs, and the API
reference generated from the numpy-style docstrings (``make docs``)."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from sphinx.ext import autosummary
from sphinx.pycode import ModuleAnalyzer

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent / "src"))  # the checkout's own sources, installed or not

import llmsched  # noqa: E402

project = "llmsched"
author = "the llmsched authors"
copyright = "the llmsched authors"
release = version = llmsched.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "myst_nb",
]

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
html_theme = "furo"
html_title = f"llmsched {release}"
html_show_sourcelink = False
html_static_path = ["_static"]
html_css_files = ["notebooks.css"]

# Markdown pages (MyST) and notebooks (myst-nb). Notebooks are shown with the outputs stored in
# them and never executed here: a notebook without outputs renders as its code and text.
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3
nb_execution_mode = "off"
# What a notebook holds is its author's: headings that start at H2 or skip a level, a notebook
# saved without its language, or an output only Jupyter can show (JSON, widgets' state) must
# not fail the build. The rest of a notebook is checked like any page.
suppress_warnings = ["myst.header", "myst-nb.lexer", "mystnb.unknown_mime_type"]

# API reference: one page per public module (written below, before Sphinx reads the sources),
# its members from autodoc, its tables from autosummary.
autosummary_generate = False
autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
    "member-order": "bysource",
    # Members are those a module defines: a name it re-exports in its ``__all__`` is listed
    # under it with a link to where it is defined (see _exported_names), not documented twice.
    "ignore-module-all": True,
}
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_class_signature = "separated"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_preprocess_types = False

# Every cross-reference to a public llmsched name must resolve (``make docs`` runs nitpicky,
# warnings as errors); other libraries' names stay text (their inventories would need the
# network), and so do private names (see _only_llmsched_names).
nitpicky = True

API = DOCS / "api"

# autosummary ends a summary at the first period that leaves valid markup; the docstrings cite
# equations and figures ("Eqs. 1-25", "Figs. 10-11"), which are not the end of a sentence.
autosummary.WELL_KNOWN_ABBREVIATIONS = (
    *autosummary.WELL_KNOWN_ABBREVIATIONS,
    "Eq.",
    "Eqs.",
    "Fig.",
    "Figs.",
    "Sec.",
)


def public_modules() -> list[ModuleType]:
    """The package and every module under it whose dotted name has no ``_``-prefixed part."""
    modules = [llmsched]
    for info in pkgutil.walk_packages(llmsched.__path__, "llmsched."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            modules.append(importlib.import_module(info.name))
    return sorted(modules, key=lambda module: module.__name__)


def summary(obj: Any) -> str:
    """The first paragraph of ``obj``'s docstring on one line (empty when it has none)."""
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def defined_here(module: ModuleType) -> list[str]:
    """The documented public classes and functions ``module`` defines (autodoc's members),
    classes first, each by name."""
    names = [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module.__name__
        and value.__doc__
    ]
    return sorted(names, key=lambda name: (not inspect.isclass(getattr(module, name)), name))


def undocumented_constants(module: ModuleType) -> list[str]:
    """Names in ``module.__all__`` that it assigns at its top level (constants, type aliases)
    without a ``#:`` doc comment. autodoc leaves undocumented data out of ``:members:``; named
    one by one they get an entry (name and value), so what a module exports has a page."""
    exported = set(getattr(module, "__all__", ()))
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return []
    assigned: list[str] = []
    for statement in tree.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        if isinstance(statement, ast.AnnAssign):
            targets = [statement.target]
        assigned += [target.id for target in targets if isinstance(target, ast.Name)]
    documented = {attribute for _, attribute in ModuleAnalyzer.for_module(module.__name__).find_attr_docs()}
    return [
        name
        for name in dict.fromkeys(assigned)
        if name in exported
        and name not in documented
        and not (inspect.isclass(getattr(module, name)) or inspect.isroutine(getattr(module, name)))
    ]


def module_page(module: ModuleType, children: list[ModuleType]) -> str:
    """The reST of one module's page: its docstring, tables of what it defines and of its
    submodules, then its members (autodoc puts a directive's content before the members)."""
    name = module.__name__
    lines = [name, "=" * len(name), "", f".. automodule:: {name}", ""]
    names = defined_here(module)
    if names:
        lines += ["   .. rubric:: Defined here", "", "   .. autosummary::", ""]
        lines += [f"      {item}" for item in names]
        lines.append("")
    if children:
        lines += ["   .. rubric:: Modules", "", "   .. list-table::", "      :widths: 30 70", ""]
        for child in children:
            lines += [f"      * - :mod:`~{child.__name__}`", f"        - {summary(child)}"]
        lines.append("")
    for constant in undocumented_constants(module):
        lines += [f".. autodata:: {name}.{constant}", ""]
    if children:
        lines += [".. toctree::", "   :hidden:", ""]
        lines += [f"   {child.__name__}" for child in children]
        lines.append("")
    return "\n".join(lines)


def write_api_pages(app: Any) -> None:
    """Write ``api/<module>.rst`` for every public module (only files whose text changed, so an
    unchanged page is not read again) and remove pages of modules that are gone."""
    modules = public_modules()
    API.mkdir(exist_ok=True)
    pages = {}
    for module in modules:
        prefix = module.__name__ + "."
        children = [
            child
            for child in modules
            if child.__name__.startswith(prefix) and "." not in child.__name__.removeprefix(prefix)
        ]
        pages[API / f"{module.__name__}.rst"] = module_page(module, children)
    for stale in set(API.glob("*.rst")) - set(pages):
        stale.unlink()
    for path, text in pages.items():
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)


def _exported_names(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """Under a module's docstring, list the names it re-exports (in its ``__all__``, defined
    elsewhere) with links to where each is documented: ``llmsched.Workload`` leads to
    ``llmsched.core.workload.Workload``."""
    if what != "module":
        return
    targets = []
    for export in getattr(obj, "__all__", ()):
        value = getattr(obj, export)
        if inspect.ismodule(value):
            targets.append(value.__name__)
            continue
        home = getattr(value, "__module__", None)
        if home and home != name and hasattr(importlib.import_module(home), export):
            targets.append(f"{home}.{export}")
    if targets:
        lines += ["", ".. rubric:: Also exported here", "", ".. autosummary::", ""]
        # relative to the module, as autosummary wants names inside the module it documents
        lines += [f"   ~{target.removeprefix(name + '.')}" for target in targets]
        lines.append("")


_ATTRIBUTES = {"attribute", "property", "data"}
_original: dict[str, list[str]] = {}


def _keep_original(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    if what in _ATTRIBUTES:
        if " ".join(lines).split() == (inspect.getdoc(type(obj)) or "").split():
            lines[:] = []  # a constant without a doc comment: not the docstring of dict or str
        _original[name] = list(lines)


def _undo_inline_type(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """Give back an attribute's or property's docstring as written when napoleon took its first
    line apart as ``type: description``: the docstrings here say "When every decode iteration
    ended, materialised: O(iterations) ...", and the types come from annotations."""
    original = _original.pop(name, None)
    if what in _ATTRIBUTES and original is not None:
        added = [line for line in lines if line.startswith(":type: ") and line not in original]
        if added:
            lines[:] = original


def _resolve_alias(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """Resolve a Python cross-reference that names an object where it is re-exported
    (``llmsched.mip.solve_pcmax``), inside a module by the name it has there (``solve_pcmax``),
    or by the name of a class the module imports only for its annotations
    (``Schedule.request_frame``), to the page of the module that defines it."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"]
    candidates = [target]
    if node.get("py:module"):
        candidates.append(f"{node['py:module']}.{target}")
    targets: list[str] = []
    for candidate in candidates:
        value = _lookup(candidate)
        if value is not None:
            targets += _homes(candidate.rpartition(".")[2], value)
    first, _, rest = target.partition(".")
    for module_name, module in sorted(sys.modules.items()):
        value = getattr(module, first, None) if module_name.startswith("llmsched") else None
        if (inspect.isclass(value) or inspect.isfunction(value)) and value.__module__.startswith("llmsched"):
            targets.append(".".join(filter(None, [value.__module__, value.__qualname__, rest])))
    domain = env.get_domain("py")
    for canonical in dict.fromkeys(targets):
        if canonical in candidates:
            continue
        node = node.deepcopy()
        node["reftarget"] = canonical
        resolved = domain.resolve_xref(
            env, node["refdoc"], app.builder, node["reftype"], canonical, node, contnode
        )
        if resolved is not None:
            return resolved
    return None


def _homes(name: str, value: Any) -> list[str]:
    """Where ``value`` may be documented: its own module and name, or (for data, which does
    not know its module) every loaded llmsched module that holds it under ``name``."""
    if inspect.ismodule(value):
        return [value.__name__]
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if module and qualname:
        return [f"{module}.{qualname}"]
    return [
        f"{module_name}.{name}"
        for module_name, loaded in sorted(sys.modules.items())
        if module_name.startswith("llmsched") and getattr(loaded, name, None) is value
    ]


def _lookup(dotted: str) -> Any:
    """The object a dotted name under ``llmsched`` names, or None."""
    if not dotted.startswith("llmsched."):
        return None
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            value = getattr(value, attribute, None)
            if value is None:
                return None
        return value
    return None


def _only_llmsched_names(app: Any, domain: Any, node: Any) -> bool | None:
    """Silence a missing Python reference unless it names a public llmsched object: names of
    other libraries (``numpy.ndarray``; ``Path`` or ``Figure`` in an annotation) have no page
    here, and private names (a base such as ``_Model``) have none by design."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    if any(part.startswith("_") for part in target.split(".")):
        return True
    if target.startswith("llmsched."):
        return None
    first = target.split(".")[0]
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("llmsched") and module is not None and hasattr(module, first):
            value = getattr(module, first)
            home = getattr(value, "__module__", None) if not inspect.ismodule(value) else value.__name__
            if home is None or home.startswith("llmsched"):
                return None  # a llmsched class, function or constant: the warning stands
    return True


def setup(app: Any) -> None:
    app.connect("builder-inited", write_api_pages)
    app.connect("autodoc-process-docstring", _exported_names)
    # around napoleon's own handler (priority 500)
    app.connect("autodoc-process-docstring", _keep_original, priority=400)
    app.connect("autodoc-process-docstring", _undo_inline_type, priority=600)
    app.connect("missing-reference", _resolve_alias)
    app.connect("warn-missing-reference", _only_llmsched_names)
