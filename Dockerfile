# syntax=docker/dockerfile:1
# The matmul daemon in a container: the DGX Spark (linux/arm64, sm_121a) and
# CUDA 13 hosts on x86-64 (linux/amd64: sm_90a Hopper, sm_120a Blackwell).
#
#   docker buildx build --platform linux/arm64,linux/amd64 \
#     --build-arg GIT_COMMIT=$(git rev-parse --short=12 HEAD) -t matmul:0.1.0 .
#   docker buildx build --platform linux/arm64 --load -t matmul:0.1.0 .   # a Spark
#
# The daemon runs as the unprivileged user matmul (uid/gid 990). Its unix
# socket lives in the volume /run/matmul/: bind the host's /run/matmul
# there, owned by uid 990 and the host group whose members may connect,
# mode 0750, and give that group to the daemon (--group-add GID, then
# --socket_group=GID), so the socket comes out srw-rw---- 990:GID.
# deploy/README.md has the docker run line; deploy/compose.yaml does all of
# it, with Prometheus and Grafana.
#
# The build stage runs the same scripts as the README and CI:
# deploy/install_deps.sh (its build profile only), deploy/build.sh,
# deploy/collect_runtime.sh. BUILD_IMAGE and RUNTIME_IMAGE name other base
# images of the same kind (a CUDA 13 devel image and the matching runtime
# one, Ubuntu 24.04 or Debian 12): tests/container/ builds on local
# stand-ins for them, where no registry can be reached.
ARG CUDA_VERSION=13.0.0
ARG BUILD_IMAGE=nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04
ARG RUNTIME_IMAGE=nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu24.04

FROM ${BUILD_IMAGE} AS build
WORKDIR /src
COPY deploy/install_deps.sh deploy/install_deps.sh
RUN deploy/install_deps.sh build && rm -rf /var/lib/apt/lists/*
# After the packages, so that a build cache keeps them across commits.
# 121a: the Spark (its own SASS: sm_120a cubins do not load on sm_121);
# 90a: H100/H200; 120a: Blackwell desktop and workstation parts.
ARG CUDA_ARCHITECTURES="121a;90a;120a"
# .git is not in the build context (.dockerignore): name the commit here
# for matmul_build_info.
ARG GIT_COMMIT=unknown
# What goes into /opt/matmul/bin; matmul-server and matmul-cli at least.
ARG BUILD_TARGETS="matmul-server matmul-cli matmul-tune matmul-bench"
# More configure options, e.g. -DMATMUL_OWN_KERNELS=OFF (cuBLASLt alone).
ARG CMAKE_ARGS=""
COPY . .
# The daemon (uid 990) opens the shm segments and request rings that
# clients make, mode 0600 under their own uids: CAP_DAC_OVERRIDE, as a file
# capability of matmul-server alone, lets it; it still uses a segment only
# for the caller that owns it (the peer credentials of its socket).
RUN BUILD_TARGETS="${BUILD_TARGETS}" \
      deploy/build.sh "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}" \
        "-DMATMUL_GIT_COMMIT=${GIT_COMMIT}" ${CMAKE_ARGS} \
    && deploy/collect_runtime.sh build /opt/matmul \
    && setcap cap_dac_override=ep /opt/matmul/bin/matmul-server

FROM ${RUNTIME_IMAGE}
COPY --from=build /opt/matmul /opt/matmul
# A binary with a file capability ignores LD_LIBRARY_PATH: /opt/matmul/lib
# goes into the loader's cache instead.
RUN groupadd --system --gid 990 matmul \
    && useradd --system --uid 990 --gid matmul --no-create-home \
         --home-dir /nonexistent --shell /usr/sbin/nologin matmul \
    && install -d -o matmul -g matmul -m 0750 /run/matmul \
    && install -d -o matmul -g matmul -m 0750 /var/cache/matmul \
    && echo /opt/matmul/lib >/etc/ld.so.conf.d/matmul.conf && ldconfig
ENV PATH=/opt/matmul/bin:${PATH} \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER matmul:matmul
# The socket directory (bind the host's) and the tuning cache (kernel
# choices timed once per GPU and driver, kept across restarts).
VOLUME ["/run/matmul", "/var/cache/matmul"]
# Prometheus /metrics.
EXPOSE 9466
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["matmul-cli", "health", "--target=unix:/run/matmul/matmul.sock", "--timeout=3s"]
ENTRYPOINT ["matmul-server"]
CMD ["--listen=unix:/run/matmul/matmul.sock", "--socket_mode=0660", \
     "--metrics_listen=0.0.0.0:9466", \
     "--tuning_cache=/var/cache/matmul/tuning.json"]
