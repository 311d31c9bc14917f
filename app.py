"""The web app's entry in a checkout: ``streamlit run app.py`` (``wikirag app`` runs the package's router).

The app lives in the package, ``wikirag/webapp/``; this file only runs its router, which registers the
package's page scripts (see ``wikirag.webapp``). Nothing at the top of the checkout is installed.
"""

from wikirag.webapp.router import main

main()
