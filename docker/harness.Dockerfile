# harness/ci: the harness and its Python dependencies on the offline base image.
#
# Built by scripts/ci-image, never by hand: no registry and no package index is reachable
# from a build here, so the context is prepared on the host first (build/ci/):
#   site/    the harness and its dependencies, installed with the host's pip --target
#            (Python 3.11 wheels; the base image's python3 is 3.11 too)
#   docker   the host's docker CLI (Debian's docker.io, same release as the base image):
#            the docker sandbox builds task images with it
#   harness  the entry point (python3 -m harness)
#
# Usage (details: docs/ci.md):
#   docker run --rm -v /var/run/docker.sock:/var/run/docker.sock \
#       -v "$PWD:$PWD" -w "$PWD" -e TMPDIR="$PWD/.harness-tmp" \
#       -e HARNESS_GATEWAY_DIR="$PWD/.harness-tmp/gateway" \
#       harness/ci run tasks/ --sandbox docker --fail-under 0.8
FROM harness/base:bookworm
COPY site /opt/harness/site
COPY docker /usr/local/bin/docker
COPY harness /usr/local/bin/harness
ENV PYTHONPATH=/opt/harness/site \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
LABEL org.harness.image="ci"
ENTRYPOINT ["/usr/local/bin/harness"]
CMD ["--help"]
