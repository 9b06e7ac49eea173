# fleetfix: one image for every role (api, worker, ingester, scheduler, agent, db upgrade).
#
#   docker build -t fleetfix .
#
# The base is pinned to a Python patch release on a Debian release. To pin it byte for byte,
# replace the tag with its digest (`docker buildx imagetools inspect python:3.11.11-slim-bookworm`)
# as `python:3.11.11-slim-bookworm@sha256:…` in PYTHON_IMAGE.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# --- build: a virtual environment with fleetfix and exactly the locked dependency versions ---
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml constraints.txt README.md alembic.ini ./
COPY core core
COPY checker checker
COPY remediator remediator
COPY cyborg cyborg
COPY ticketing ticketing
COPY api api
COPY migrations migrations
RUN python -m venv /opt/fleetfix \
 && /opt/fleetfix/bin/pip install -c constraints.txt . \
 && /opt/fleetfix/bin/fleetfix --help >/dev/null

# --- runtime: the environment, no build tree, a user without privileges ---
FROM ${PYTHON_IMAGE}
# The agent's collectors run these tools when they are there (a container sees little hardware;
# hosts install the agent alone, the fleetfix-agent distribution and its systemd unit: deploy/).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ipmitool smartmontools dmidecode ethtool \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 fleetfix \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/fleetfix --create-home --shell /usr/sbin/nologin fleetfix \
 && install -d -o fleetfix -g fleetfix -m 0750 /var/lib/fleetfix-agent /run/fleetfix-metrics
COPY --from=build /opt/fleetfix /opt/fleetfix
ENV PATH=/opt/fleetfix/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    FLEETFIX_DATA_DIR=/var/lib/fleetfix \
    FLEETFIX_METRICS_DIR=/run/fleetfix-metrics \
    FLEETFIX_LOG_FORMAT=json
USER 10001:10001
WORKDIR /var/lib/fleetfix
EXPOSE 8000
ENTRYPOINT ["fleetfix"]
CMD ["api"]
