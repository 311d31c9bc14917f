"""The compare page's entry in a checkout (URL ``/compare``): runs the router, which runs the page.

The page itself is ``wikirag/webapp/compare.py``. Streamlit treats a ``pages/`` folder beside the entry
script (``app.py``) as the app's pages until ``st.navigation`` has run once in the process, and until
then routes ``/compare`` straight to this file. Running the router here keeps its sign-in gate in front
of the page even then; the AppTest tests open the page through this file (``at.switch_page("pages/compare.py")``
before the first run). Once the router has run, Streamlit serves the package's page scripts it registers,
and this file is not run.
"""

from wikirag.webapp.router import main

main()
