# The per-node latency probe: only what it imports (no torch). Build context: the repository root.
#   docker build -f deploy/images/latency-probe.Dockerfile -t rlscore/latency-probe:0.1.0 .
FROM python:3.11-slim
RUN pip install --no-cache-dir "fastapi>=0.110" "uvicorn>=0.29" "prometheus-client>=0.20"
COPY suggestion_server/__init__.py latency_probe/probe.py /opt/rlscore/suggestion_server/
ENV PYTHONPATH=/opt/rlscore PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 9102
ENTRYPOINT ["python", "-m", "suggestion_server.probe"]
