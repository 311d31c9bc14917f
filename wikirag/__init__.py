"""wikirag: answer questions from many small markdown wikis, with citations you can check.

Four calls cover the library::

    from wikirag import Workspace, build, search

    ws = Workspace.locate()                       # --home, $WIKIRAG_HOME or the current folder
    build(ws.wiki("brewing"))                     # incremental, atomic index build
    result = search(ws, "public-help", "How hot should the water be?", clearance="public")
    for p in result.passages:
        print(p.rank, p.wiki, p.path, p.line, p.text[:60])
"""

__version__ = "0.1.0"

from .access import Level
from .composition import Composition
from .errors import (
    AccessDenied,
    BuildError,
    CompositionError,
    IndexMissing,
    ManifestError,
    NotFound,
    QueryError,
    WikiragError,
)
from .index import BuildReport, IndexStatus, build, status
from .search import Passage, SearchResult, search
from .wiki import Wiki
from .workspace import Workspace

__all__ = [
    "AccessDenied",
    "BuildError",
    "BuildReport",
    "Composition",
    "CompositionError",
    "IndexMissing",
    "IndexStatus",
    "Level",
    "ManifestError",
    "NotFound",
    "Passage",
    "QueryError",
    "SearchResult",
    "Wiki",
    "WikiragError",
    "Workspace",
    "__version__",
    "build",
    "search",
    "status",
]
