"""The package's shape: no import cycles, every exception in errors.py, a public API that holds."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import wikirag

PACKAGE = Path(wikirag.__file__).parent


def _modules() -> dict[str, ast.Module]:
    """Every module of the library, by dotted name relative to the package (``cli``, ``webapp.ui``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(path.read_text(encoding="utf-8"))
    return out


def _top_level_imports(name: str, tree: ast.Module, is_package: bool = False) -> set[str]:
    """Modules of the package that ``name`` imports as it is imported (not inside functions or
    ``if TYPE_CHECKING``), as dotted names relative to the package."""
    found = set()
    package = name.split(".") if is_package else name.split(".")[:-1]
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            if node.module:
                found.add(".".join(base))
            found.update(".".join([*base, a.name]) for a in node.names)  # from . import x: maybe a module
    return found


def test_no_import_cycles() -> None:
    modules = _modules()
    graph = {name: {m for m in _top_level_imports(name, tree, (PACKAGE / name.replace(".", "/")).is_dir())
                    if m in modules and m != name} for name, tree in modules.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)


def test_every_exception_class_is_in_errors_and_none_raises_the_base_class() -> None:
    for name, tree in _modules().items():
        if name.startswith("webapp"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and name != "errors":
                bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                assert not bases & {"Exception", "WikiragError", "ValueError"} and not node.name.endswith("Error"), \
                    f"wikirag/{name}.py defines exception {node.name}: move it to errors.py"
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                func = node.exc.func
                assert not (isinstance(func, ast.Name) and func.id == "WikiragError"), \
                    f"wikirag/{name}.py:{node.lineno} raises the bare WikiragError: raise a specific subclass"


def test_the_public_api_holds_after_every_module_is_imported() -> None:
    for name in _modules():
        if name and not name.startswith("webapp"):  # the app's modules run only under streamlit
            importlib.import_module(f"wikirag.{name}")
    from wikirag import Answer, AnswerResult, Citation, Passage, SearchResult, answer, build, search, status

    assert all(callable(f) and not isinstance(f, type(wikirag)) for f in (answer, build, search, status))
    assert {Answer.__module__, AnswerResult.__module__, Citation.__module__, Passage.__module__,
            SearchResult.__module__} == {"wikirag.answers", "wikirag.prompt", "wikirag.passage", "wikirag.retrieval"}
    assert sorted(wikirag.__all__) == wikirag.__all__
    for name in wikirag.__all__:
        assert getattr(wikirag, name) is not None


def test_the_passage_module_is_a_leaf() -> None:
    tree = _modules()["passage"]
    assert not _top_level_imports("passage", tree)
    for name in ("prompt", "extractive"):
        assert "retrieval" not in {m.rpartition(".")[2] for m in _top_level_imports(name, _modules()[name])}
