# The tokmaint image: every command (registry, relay, ingest server, pipeline, revise, trainer), and
# Flink's JobManager and TaskManagers for the scale-out job (PyFlink, Java 17, the connector's jars).
# CPU torch by default; --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 for CUDA.
# BASE: any image with Python 3.11, its shared library (Flink's thread mode loads it) and its venv
# module (the official slim image by default;
# `make image` uses a Debian bookworm of its own where no image registry can be reached, with
# the wheels made on the host in wheelhouse/ and PIP_NO_INDEX=1: an offline, reproducible build).
ARG BASE=python:3.11.14-slim-bookworm

FROM ${BASE} AS wheelhouse
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG PIP_NO_INDEX=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /wheels
# wheelhouse/ (git-ignored) holds wheels made on the host, when there are any: pip wheel takes
# them and fetches only what is missing (nothing with PIP_NO_INDEX=1).
COPY requirements.lock wheelhous[e] /wheels/
RUN python -m venv /opt/wheel && /opt/wheel/bin/pip wheel --quiet --find-links /wheels --wheel-dir /wheels \
        --extra-index-url "$TORCH_INDEX" -r requirements.lock "setuptools>=68"

FROM ${BASE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# The dependency layer first: it is rebuilt only when the pins change, not the source.
RUN --mount=type=bind,from=wheelhouse,source=/wheels,target=/wheels \
    pip install --quiet --no-index --find-links /wheels -r /wheels/requirements.lock "setuptools>=68"
COPY pyproject.toml README.md ./
COPY schemas schemas
COPY tokenizer_service tokenizer_service
COPY tokmaint tokmaint
COPY registry registry
COPY pipeline pipeline
COPY trainer trainer
COPY demo demo
RUN pip install --quiet --no-index --no-deps --no-build-isolation .
# Flink's Kafka connector jars, from the pinned package in the wheelhouse (hash and manifests checked).
RUN --mount=type=bind,from=wheelhouse,source=/wheels,target=/wheels \
    python -m pipeline.flink_jars install --find-links /wheels >/dev/null

FROM ${BASE} AS runtime
# Java 17 for Flink's JobManager and TaskManagers (the local base has it already).
RUN command -v java >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
        openjdk-17-jre-headless && rm -rf /var/lib/apt/lists/*; }
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 MPLCONFIGDIR=/tmp/matplotlib
COPY --from=build /opt/venv /opt/venv
COPY data /app/data
RUN useradd --system --uid 10001 --home-dir /app tokmaint \
    && mkdir -p /var/lib/tokmaint && chown tokmaint /var/lib/tokmaint
WORKDIR /app
USER 10001
EXPOSE 8000 8100
# Health checks are the services' (docker-compose.yml, k8s/): each command serves its own.
ENTRYPOINT ["tokmaint"]
CMD ["--help"]
