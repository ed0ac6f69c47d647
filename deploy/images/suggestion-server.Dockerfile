# The suggestion server with the shipped models. Build context: the repository root.
#   docker build -f deploy/images/suggestion-server.Dockerfile -t rlscore/suggestion-server:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
# CPU-only torch: the CUDA build is several GB and the model is tiny.
RUN pip install --no-cache-dir --prefix=/install torch==2.8.0 --index-url https://download.pytorch.org/whl/cpu
COPY pyproject.toml README.md ./
COPY agent agent
COPY suggestion_server suggestion_server
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
COPY models /opt/rlscore/models
# numba caches the compiled hot path where it can write: /tmp (an emptyDir under deploy/), so the
# server's workers compile it once per pod
ENV RLSCORE_MODEL_DIR=/opt/rlscore/models PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba-cache
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["rlscore-server", "--host", "0.0.0.0", "--port", "8000"]
