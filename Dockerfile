# fleetfix: one image for every role (api, worker, scheduler, agent).
FROM python:3.11-slim-bookworm AS build
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
 && /opt/fleetfix/bin/pip install --no-cache-dir -c constraints.txt .

FROM python:3.11-slim-bookworm
RUN useradd --system --uid 10001 --home-dir /var/lib/fleetfix --create-home fleetfix
COPY --from=build /opt/fleetfix /opt/fleetfix
ENV PATH=/opt/fleetfix/bin:$PATH FLEETFIX_DATA_DIR=/var/lib/fleetfix
USER fleetfix
WORKDIR /var/lib/fleetfix
EXPOSE 8000
ENTRYPOINT ["fleetfix"]
CMD ["api"]
