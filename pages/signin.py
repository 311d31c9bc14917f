"""Sign in with a local account, or with single sign-on when it is configured."""

import streamlit as st

from pages import ui
from wikirag.users import AuthError

st.title("wikirag")
st.caption("Answers from your team's wikis, with citations you can check. Sign in to continue.")

with st.form("signin"):
    name = st.text_input("User name")
    password = st.text_input("Password", type="password")
    submitted = st.form_submit_button("Sign in", type="primary")
if submitted:
    try:
        ui.sign_in(ui.user_store().authenticate(name, password))
        st.rerun()
    except AuthError as exc:
        st.error(f"{str(exc).capitalize()}.")

if ui.sso_configured():
    st.button("Sign in with single sign-on", on_click=st.login, icon=":material/key:")

if ui.user_store().is_demo:
    st.info("Demo accounts (demo only, see README): `demo-public` / `demo-public-pw`, "
            "`demo-internal` / `demo-internal-pw`, `demo-confidential` / `demo-confidential-pw`.")
