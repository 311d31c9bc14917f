"""wikirag: answer questions from many small markdown wikis, with citations you can check.

Four calls cover the library::

    from wikirag import Workspace, answer, build, search

    ws = Workspace.locate()                       # --home, $WIKIRAG_HOME or the current folder
    build(ws.wiki("brewing"))                     # incremental, atomic index build
    result = search(ws, "public-help", "How hot should the water be?", clearance="public")
    for p in result.passages:
        print(p.rank, p.wiki, p.path, p.line, p.text[:60])
    reply = answer(ws, "public-help", "How hot should the water be?", clearance="public").result
    print(reply.text, [(c.n, c.wiki, c.path, c.start, c.end) for c in reply.citations])
"""

__version__ = "0.1.0"

# Names are imported on first use (PEP 562), so that `import wikirag.users` or `wikirag --help` do not
# pay for numpy, bm25s and scipy.
_EXPORTS = {
    "Level": "access", "Composition": "composition", "AccessDenied": "errors", "BuildError": "errors",
    "CompositionError": "errors", "IndexMissing": "errors", "ManifestError": "errors", "NotFound": "errors",
    "QueryError": "errors", "WikiragError": "errors", "BuildReport": "index", "IndexStatus": "index",
    "build": "index", "status": "index", "Passage": "passage", "SearchResult": "retrieval", "search": "retrieval",
    "Wiki": "wiki", "Workspace": "workspace", "Answer": "answers", "AnswerResult": "answers", "answer": "answers",
    "Citation": "prompt", "ModelError": "errors",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'wikirag' has no attribute {name!r}")


__all__ = [
    "AccessDenied",
    "Answer",
    "AnswerResult",
    "BuildError",
    "BuildReport",
    "Citation",
    "Composition",
    "CompositionError",
    "IndexMissing",
    "IndexStatus",
    "Level",
    "ManifestError",
    "ModelError",
    "NotFound",
    "Passage",
    "QueryError",
    "SearchResult",
    "Wiki",
    "WikiragError",
    "Workspace",
    "__version__",
    "answer",
    "build",
    "search",
    "status",
]
