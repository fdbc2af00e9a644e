# syntax=docker/dockerfile:1.7
#
# Condenser as a small, non-root container image.
#
#   docker build -t condenser .
#   docker run -p 8080:8080 -v condenser-data:/data condenser
#
# The default database is an SQLite file on the /data volume; set
# DATABASE_URL=postgres://… for Postgres (several instances must share one).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
WORKDIR /src
# Every target the manifest declares (the bench too) and every member of
# the workspace (the test upstream, the benchmarks' tools) must exist for
# cargo to load it; docker/check.py builds from exactly these files.
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
COPY benches ./benches
COPY migrations ./migrations
COPY tests/fake-upstream ./tests/fake-upstream
COPY bench/loadgen ./bench/loadgen
COPY bench/floor ./bench/floor
# The release build is profile-guided (scripts/build-release): an
# instrumented build serves a training load through the test upstream, on
# SQLite, and the counts it writes steer the final build. It needs LLVM's
# llvm-profdata of rustc's version and Python for the load's bodies
# (unpinned: this stage's packages are build tools, not in the image).
COPY scripts/build-release scripts/pgo-train ./scripts/
COPY bench/lib.sh bench/make_bodies.py ./bench/
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* \
    && rustup component add llvm-tools
# Registry and target caches survive between builds (BuildKit); the binary is
# copied out of the cached target directory before the mount goes away.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    scripts/build-release /out/condenser

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# No ca-certificates package: TLS to the upstreams and to Postgres goes
# through rustls with Mozilla's roots compiled into the binary.
RUN groupadd --system --gid 10001 condenser \
    && useradd --system --uid 10001 --gid 10001 --home-dir /data --create-home condenser
COPY --from=build /out/condenser /usr/local/bin/condenser
COPY config/default.toml /etc/condenser/condenser.toml

# Numeric, so Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
ENV CONDENSER_LISTEN=0.0.0.0:8080 \
    DATABASE_URL=sqlite:///data/condenser.db \
    CONDENSER_LOG_FORMAT=json
EXPOSE 8080
# SIGTERM drains in-flight streams for shutdown_grace (30 s by default);
# give the container at least that long (`docker stop -t 35`,
# terminationGracePeriodSeconds in Kubernetes).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["condenser", "--config", "/etc/condenser/condenser.toml", "healthcheck"]
ENTRYPOINT ["condenser", "--config", "/etc/condenser/condenser.toml"]
CMD ["serve"]
