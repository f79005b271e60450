# matmul-server for the DGX Spark (arm64) and other CUDA 13 hosts.
#   docker build -t matmul-server .
#   docker run --gpus all --ipc=host --pid=host -v /tmp:/tmp -p 127.0.0.1:9466:9466 matmul-server
FROM nvidia/cuda:13.0.0-devel-ubuntu24.04 AS build
ARG CUDA_ARCHITECTURES="90a;120a;121a"
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
      --no-install-recommends build-essential cmake ninja-build pkg-config \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
      libabsl-dev prometheus-cpp-dev libopenblas-dev nlohmann-json3-dev zlib1g-dev \
      libgtest-dev libgmock-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" \
    && cmake --build build --target matmul-server matmul-cli matmul-bench matmul-tune
# The binaries plus the shared libraries they need beyond glibc and CUDA.
RUN mkdir -p /opt/matmul/lib \
    && cp build/server/matmul-server build/client/matmul-cli \
          build/kernels/cuda/matmul-bench build/kernels/cuda/matmul-tune /opt/matmul/ \
    && ldd /opt/matmul/matmul-* | awk '/=> \// {print $3}' | sort -u \
       | grep -vE '/lib(c|m|dl|pthread|rt|cuda|cudart|cublas|cublasLt)\.so|ld-linux' \
       | xargs -r cp -L -t /opt/matmul/lib/

FROM nvidia/cuda:13.0.0-runtime-ubuntu24.04
COPY --from=build /opt/matmul /opt/matmul
ENV LD_LIBRARY_PATH=/opt/matmul/lib
EXPOSE 9466
ENTRYPOINT ["/opt/matmul/matmul-server"]
CMD ["--listen=unix:/tmp/matmul.sock", "--metrics_listen=0.0.0.0:9466", \
     "--tuning_cache=/tmp/matmul-tuning.json"]
