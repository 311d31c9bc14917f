"""wikirag's web app: a router. Sign in first; then chat, compare and the knowledge-base portal.

Run it with ``wikirag app`` (or ``streamlit run app.py --browser.gatherUsageStats false``).
"""

import streamlit as st

from pages import ui

st.set_page_config(page_title="wikirag", page_icon=":material/menu_book:", layout="wide")

ui.warm_up()  # loads the indexes in the background while the visitor signs in
user = ui.current_user()
if user is None:
    page = st.navigation([st.Page("pages/signin.py", title="Sign in", icon=":material/login:")],
                         position="hidden")
else:
    page = st.navigation([
        st.Page("pages/chat.py", title="Chat", icon=":material/chat:", default=True),
        st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
        st.Page("pages/portal.py", title="Knowledge base", icon=":material/menu_book:"),
    ])
    ui.sidebar(user)
page.run()
