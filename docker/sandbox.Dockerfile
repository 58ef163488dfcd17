# Sandbox image the harness runs agent commands in.
#
#   images/bootstrap-base.sh        # builds harness/base:bookworm offline
#   docker build -f docker/sandbox.Dockerfile -t harness/sandbox:bookworm docker/
#
# Builds offline: no apt here (the base ships without apt lists), only tools
# that debootstrap's minbase already has (passwd: groupadd/useradd).
ARG BASE=harness/base:bookworm
FROM ${BASE}

# Fixed, unprivileged ids (same as distroless "nonroot") so bind-mounted
# workspaces can be chown'ed from the host without a name lookup.
ARG SANDBOX_UID=65532
ARG SANDBOX_GID=65532

RUN python3 --version \
 && groupadd --gid "${SANDBOX_GID}" sandbox \
 && useradd --uid "${SANDBOX_UID}" --gid "${SANDBOX_GID}" --no-log-init \
        --create-home --home-dir /home/sandbox --shell /bin/bash sandbox \
 && mkdir -p /app \
 && chown sandbox:sandbox /app

ENV LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
LABEL org.harness.sandbox="bookworm"
WORKDIR /app
CMD ["/bin/bash"]
