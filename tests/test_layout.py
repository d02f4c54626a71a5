"""The test tree mirrors the package: one test module per library module, at the mirrored path."""

from __future__ import annotations

from pathlib import Path

import llmsched

SRC = Path(llmsched.__file__).resolve().parent
TESTS = Path(__file__).resolve().parent


def expected_test_module(module: Path) -> Path:
    """Where the tests of ``module`` (a file under the package) belong: the same folders under
    tests/, the name prefixed ``test_`` with a leading underscore dropped (``_checks.py`` ->
    ``test_checks.py``)."""
    relative = module.relative_to(SRC)
    return TESTS.joinpath(*relative.parent.parts, "test_" + relative.name.removeprefix("_"))


def library_modules() -> list[Path]:
    """Every module of the package but the dunder ones (``__init__``, ``__main__``)."""
    return sorted(path for path in SRC.rglob("*.py") if not path.name.startswith("__"))


def test_the_mirror_rule_maps_names_as_the_tree_does() -> None:
    """A module in a subpackage maps into the same folder; a private one loses its underscore."""
    assert expected_test_module(SRC / "mip" / "full" / "cpsat.py") == TESTS / "mip" / "full" / "test_cpsat.py"
    assert expected_test_module(SRC / "_checks.py") == TESTS / "test_checks.py"
    assert expected_test_module(SRC / "plot.py") == TESTS / "test_plot.py"


def test_every_library_module_has_its_test_module() -> None:
    """Each src/llmsched/**/X.py has tests/**/test_X.py at the mirrored path, so that a new
    module without tests fails here."""
    modules = library_modules()
    assert {SRC / "core" / "checks.py", SRC / "mip" / "pcmax" / "budgets.py"} <= set(modules)
    missing = [
        f"{module.relative_to(SRC.parent)} -> {expected_test_module(module).relative_to(TESTS.parent)}"
        for module in modules
        if not expected_test_module(module).is_file()
    ]
    assert not missing, "library modules without a test module:\n" + "\n".join(missing)


def test_every_test_folder_is_a_package() -> None:
    """Each folder of test modules has an ``__init__.py`` (two test_result.py files, one in
    tests/ and one in tests/mip/, must not clash)."""
    folders = {expected_test_module(module).parent for module in library_modules()}
    assert [folder for folder in sorted(folders) if not (folder / "__init__.py").is_file()] == []
