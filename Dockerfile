# The mover image, for those who build images with docker. `cargo xtask
# dist` writes the same image without a daemon (dist/mover_*.oci.tar);
# build this one from the binary that command leaves behind:
#
#   cargo xtask dist
#   docker build -t REGISTRY/volmig/mover:0.1.0 .
#
# The context is the repository; .dockerignore sends only the two files.
FROM scratch
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="mover" \
      org.opencontainers.image.description="volmig's data mover: resumable rsync-style transfer of a volume's tree" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/volmig/volmig" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY target/x86_64-unknown-linux-gnu/dist/mover /mover
COPY LICENSE /LICENSE
ENTRYPOINT ["/mover"]
