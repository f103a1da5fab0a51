# ovserve runtime image: the server only needs OpenVINO GenAI, not torch (export happens elsewhere).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /opt/ovserve
COPY pyproject.toml README.md ./
COPY ovserve ./ovserve
RUN pip install --no-cache-dir . \
    && useradd --system --uid 10001 ovserve

USER 10001
EXPOSE 8000
# Mount an exported model at /models/<name> and pass its path, e.g.
#   docker run -p 8000:8000 -v $PWD/models:/models ovserve --model_path /models/tiny-llm --model_name tiny-llm
ENTRYPOINT ["ovserve", "serve", "--host", "0.0.0.0", "--port", "8000"]
