# syntax=docker/dockerfile:1
# The tokmaint image: every command (registry, relay, ingest server, pipeline, revise, trainer).
# CPU torch by default; --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 for CUDA.

FROM python:3.11.14-slim-bookworm AS build
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# The dependency layer first: it is rebuilt only when the pins change, not the source.
COPY requirements.lock ./
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --extra-index-url "$TORCH_INDEX" -r requirements.lock
COPY pyproject.toml README.md ./
COPY schemas schemas
COPY tokenizer_service tokenizer_service
COPY tokmaint tokmaint
COPY registry registry
COPY pipeline pipeline
COPY trainer trainer
COPY demo demo
RUN pip install --no-deps --no-build-isolation .

FROM python:3.11.14-slim-bookworm AS runtime
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
