# syntax=docker/dockerfile:1
# The fedrca worker image: `fedrca` is the entry point, the Kubernetes manifests (k8s/) give the
# sub-command and its options, e.g. `docker run fedrca:0.1.0 run --config ... --broker ...`.
#   docker build -t fedrca:0.1.0 .
# tests/deploy/test_dockerfile.py checks that every path copied here exists in the build context
# (.dockerignore included) and that the entry point and command are real CLI commands.
ARG PYTHON_VERSION=3.11

# ---- build: the fedrca wheel and the wheels of its dependencies
FROM python:${PYTHON_VERSION}-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# ---- runtime: the package installed from the wheels, no build tools, no sources
FROM python:${PYTHON_VERSION}-slim
# uid/gid 10001: the manifests' runAsUser/runAsGroup
RUN groupadd --system --gid 10001 fedrca \
 && useradd --system --uid 10001 --gid fedrca --home-dir /home/fedrca --create-home fedrca
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels fedrca
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib
USER 10001:10001
WORKDIR /home/fedrca
# Prometheus /metrics (and the /healthz, /readyz probes) of `fedrca run --metrics-port 9400`
EXPOSE 9400
ENTRYPOINT ["fedrca"]
CMD ["--help"]
