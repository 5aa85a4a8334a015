# The fenced image: the static fenced and fencectl binaries and nothing else.
#
# The build context is a directory staged by scripts/docker-build.sh (run it,
# or `make image`): the two binaries built with CGO_ENABLED=0, etc/passwd and
# etc/group from docker/rootfs, and an empty data/ directory. Nothing is pulled.
FROM scratch

COPY etc/ /etc/
COPY fenced fencectl /
# The volume's mount point belongs to the fenced user: a new named volume
# mounted on /data takes this owner and mode.
COPY --chown=65532:65532 data /data

ENV FENCED_DATA_DIR=/data \
    FENCED_HTTP_ADDR=0.0.0.0:7700 \
    FENCED_RAFT_ADDR=0.0.0.0:7701

USER 65532:65532
WORKDIR /data
VOLUME /data
EXPOSE 7700 7701

# Healthy when this node is ready to serve: it leads, or knows a leader to
# forward to (fencectl health asks only this node, GET /readyz, and exits 0).
HEALTHCHECK --interval=5s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/fencectl", "health", "--endpoints", "127.0.0.1:7700", "--timeout", "3s"]

ENTRYPOINT ["/fenced"]
