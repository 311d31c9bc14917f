"""wikirag's web app (Streamlit), shipped inside the package so that ``wikirag app`` works after a plain install.

::

    wikirag/webapp/router.py     the entry script (``wikirag app`` runs ``streamlit run`` on it): the sign-in
                                 gate, then st.navigation over the pages
    wikirag/webapp/<page>.py     the page scripts: signin, chat, compare, portal (see :data:`PAGE_NAMES`)
    wikirag/webapp/ui.py         the pieces the pages share (cached workspace, session user, rendering)

The router registers each page by the absolute path of its script here (:func:`page_file`), and the pages
link to each other by the same paths (``st.page_link(ui.PORTAL, query_params=...)``), so pages and links
resolve the same wherever the package is installed and whichever entry script Streamlit runs. Each page's
URL is its file name (``/chat``, ``/portal?wiki=…&path=…&start=…&end=…``).

There is deliberately no ``pages/`` folder here: until ``st.navigation`` has run once in a process,
Streamlit routes a URL such as ``/portal`` straight to ``pages/portal.py`` beside the entry script,
past the router's sign-in gate. A checkout keeps its top-level ``app.py`` and ``pages/`` for
``streamlit run app.py``; they are thin files that only call :func:`wikirag.webapp.router.main`, and
are not installed.

This module imports nothing but the standard library: ``wikirag app`` reads :data:`ROUTER` without
loading Streamlit.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
ROUTER = HERE / "router.py"  # what `wikirag app` passes to `streamlit run`
PAGE_NAMES = ("signin", "chat", "compare", "portal")


def page_file(name: str) -> Path:
    """The absolute path of page ``name``'s script (one of :data:`PAGE_NAMES`), as st.Page and st.page_link take it."""
    if name not in PAGE_NAMES:
        raise ValueError(f"unknown page {name!r}: one of {', '.join(PAGE_NAMES)}")
    return HERE / f"{name}.py"
