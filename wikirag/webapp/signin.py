"""Sign in with a local account, or with single sign-on when it is configured.

A Streamlit page script, not a module to import (importing it runs the page): the router registers
it with st.navigation and Streamlit runs it top to bottom on every rerun (see ``wikirag.webapp``).
"""

import logging
import secrets

import streamlit as st

from wikirag.errors import AuthError, WikiragError
from wikirag.webapp import ui

log = logging.getLogger("wikirag.webapp")

st.title("wikirag")
st.caption("Answers from your team's wikis, with citations you can check. Sign in to continue.")

store = ui.user_store()
try:
    accounts = store.load().users
except WikiragError as exc:  # e.g. a users file holding a published demo password outside demo mode
    log.error("the accounts file is not usable: %s", exc)  # the details (a path) for the administrator only
    st.error("Sign-in is not available: the accounts file is not usable. The server's log says why.")
    st.stop()
if not accounts and not ui.sso_configured():
    st.error("No accounts are set up. Add one with `wikirag user add NAME --clearance LEVEL`, "
             "or start the app with `wikirag app --demo` to use the demo accounts.")
    st.stop()

with st.form("signin"):
    name = st.text_input("User name")
    password = st.text_input("Password", type="password")
    submitted = st.form_submit_button("Sign in", type="primary")
if submitted:
    # limited per browser session, and (more loosely) per network address when Streamlit knows it (not on
    # localhost, where it is None); see wikirag.users.LoginThrottle
    client = st.session_state.setdefault("client", secrets.token_hex(8))
    try:
        user = store.authenticate(name, password, client=client, address=st.context.ip_address)
    except AuthError as exc:  # wrong name or password, or too many tries: the message never says which name exists
        st.error(f"{str(exc).capitalize()}.")
    except Exception:  # anything else: logged for the administrator, never a traceback or path to the visitor
        log.exception("sign-in failed unexpectedly")
        st.error("Sign-in failed. Try again; if it keeps failing, ask an administrator (the server's log says why).")
    else:
        token, started = ui.session_store().start(user)  # kept server-side; the browser gets the token only
        ui.sign_in(user, token=token, started=started)
        st.rerun()

if ui.sso_configured():
    st.button("Sign in with single sign-on", on_click=st.login, icon=":material/key:")

if store.is_demo:
    st.info("Demo accounts (demo only, see README): `demo-public` / `demo-public-pw`, "
            "`demo-internal` / `demo-internal-pw`, `demo-confidential` / `demo-confidential-pw`.")
