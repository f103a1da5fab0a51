# syntax=docker/dockerfile:1
# ovserve image. Two stages: the builder makes a venv in /opt/venv from pinned wheels, the runtime
# stage copies only that venv onto the same slim base (no compiler, no pip cache, no sources).
#
#   docker build -t ovserve:0.1.0 .                                  # serve only (no torch)
#   docker build -t ovserve:0.1.0-export --build-arg WITH_EXPORT=1 .   # + `ovserve export` (torch CPU)
#   docker run -p 8000:8000 -v "$PWD/models:/models:ro" ovserve:0.1.0
#
# Pin the base by digest once it has been pulled where a registry is reachable:
#   docker buildx imagetools inspect python:3.11.11-slim-bookworm   ->   --build-arg PYTHON_IMAGE=python@sha256:...
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ARG WITH_EXPORT=0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# Dependencies first: this layer is reused until the pins change (scripts/lock_image_deps.py).
COPY deploy/docker/requirements-runtime.txt deploy/docker/requirements-export.txt ./
RUN pip install --no-cache-dir --no-deps -r requirements-runtime.txt
# torch's CPU build lives only on PyTorch's index (PyPI's default torch is a multi-GB CUDA build);
# everything else comes from PyPI, with torch already satisfied.
RUN if [ "$WITH_EXPORT" = 1 ]; then \
        pip install --no-cache-dir --no-deps --index-url "$TORCH_INDEX_URL" \
            "$(grep '^torch==' requirements-export.txt)" \
        && pip install --no-cache-dir --no-deps -r requirements-export.txt; \
    fi
COPY pyproject.toml README.md ./
COPY ovserve ./ovserve
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /tmp/wheels . \
    && pip install --no-cache-dir --no-deps /tmp/wheels/ovserve-*.whl \
    && pip check \
    && ovserve serve --help >/dev/null

FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
RUN groupadd --system --gid 10001 ovserve \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin ovserve
COPY --from=builder /opt/venv /opt/venv
# Runs as a fixed non-root UID (Kubernetes' runAsNonRoot checks a numeric USER) and writes only
# to /tmp, so the root file system can be read-only.
USER 10001:10001
WORKDIR /tmp
EXPOSE 8000
# Liveness of the HTTP server (models may still be loading: readiness is /v2/health/ready). No
# curl in slim images, so Python's urllib; it assumes the default port 8000.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/v2/health/live', timeout=4).status != 200)"]
ENTRYPOINT ["ovserve", "serve"]
CMD ["--config_path", "/models/config.json", "--host", "0.0.0.0", "--port", "8000"]
