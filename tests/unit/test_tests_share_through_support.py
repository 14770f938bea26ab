"""The tests share what they share through tests.support (plain modules, and fixtures a module
imports to use): no file under tests/ imports a test module or a conftest.py as a library.
pytest.ini puts only the repository on the path; pytest itself puts a test's own folder
there while it collects, so an import of a neighbour would still run, which this test stops."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported_test_modules(source: str, test_modules: set[str]) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [(node.module or "").split(".")[0]]
        else:
            continue
        found += [(node.lineno, name) for name in names if name in test_modules]
    return found


def test_no_test_module_imports_another_or_a_conftest():
    test_modules = {path.stem for path in TESTS.rglob("test_*.py")} | {"conftest"}
    found = [f"{path.relative_to(TESTS)}:{line}: {name}"
             for path in sorted(TESTS.rglob("*.py"))
             for line, name in imported_test_modules(path.read_text(encoding="utf-8"),
                                                     test_modules)]
    assert not found, "import it from tests.support instead:\n" + "\n".join(found)
    # what the rule reads
    assert imported_test_modules("from test_app_corpus import chart\nimport conftest\n"
                                 "from tests.support.app_pages import chart\n",
                                 {"test_app_corpus", "conftest"}) == [
        (1, "test_app_corpus"), (2, "conftest")]
