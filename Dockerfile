# syntax=docker/dockerfile:1
#
# The kmfleet worker image (docs/operations.md). Two stages:
#   build  CUDA devel image + Node 22 LTS from the official tarball (version and SHA-256 pinned): npm ci, the native
#          addon for the GPUs users rent (KMFLEET_CUDA_ARCHS) and the TypeScript build, then dev deps pruned.
#   run    CUDA base image (no toolkit): the addon links cudart statically and the driver comes from the host
#          through the NVIDIA container toolkit. Non-root, tini as PID 1 so SIGTERM reaches the worker.
#
#   docker build -t kmfleet:dev .
#   docker build --build-arg KMFLEET_CUDA_ARCHS="90" -t kmfleet:h100 .     # one architecture: faster build
#   docker run --gpus all -e REDIS_URL=redis://host:6379 kmfleet:dev       # runs `kmfleet worker`
#
# No Docker engine runs in CI: test/unit/dockerfile.test.ts checks this file statically.

ARG CUDA_VERSION=13.0.2
ARG UBUNTU_VERSION=24.04
# The base images by digest as well as tag: a re-pushed tag can't change what is built. Change a digest with its tag
# (CUDA_VERSION, UBUNTU_VERSION); read the current ones with
#   docker buildx imagetools inspect nvidia/cuda:13.0.2-devel-ubuntu24.04   (the "Digest:" of the index, all platforms)
ARG CUDA_DEVEL_DIGEST=sha256:5dc1bca23d05bd37b011be68ec470c03b403a5da07ec3a86e41af9470e9d0cc6
ARG CUDA_BASE_DIGEST=sha256:2ab6381d970b211fb93853796dc6707eb8a72575a375c422b17cf4d8b2641701

# ---------------------------------------------------------------------------------------------------------------
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu${UBUNTU_VERSION}@${CUDA_DEVEL_DIGEST} AS build

# Node 22 (LTS) from nodejs.org, checksums from its SHASUMS256.txt: a tampered or truncated download fails the build.
ARG NODE_VERSION=22.22.2
ARG NODE_SHA256_AMD64=88fd1ce767091fd8d4a99fdb2356e98c819f93f3b1f8663853a2dee9b438068a
ARG NODE_SHA256_ARM64=e9e1930fd321a470e29bb68f30318bf58e3ecb4acb4f1533fb19c58328a091fe
ARG TARGETARCH
# CUDA architectures of the addon: A100 (80), A10G (86), L4/L40S (89), H100/H200 (90). Read by CMakeLists.txt.
ARG KMFLEET_CUDA_ARCHS="80;86;89;90"

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates curl xz-utils cmake make g++ python3 \
 && rm -rf /var/lib/apt/lists/*

RUN arch="${TARGETARCH:-amd64}" \
 && case "$arch" in \
      amd64) node_arch=x64;   sha="${NODE_SHA256_AMD64}" ;; \
      arm64) node_arch=arm64; sha="${NODE_SHA256_ARM64}" ;; \
      *) echo "unsupported architecture: $arch" >&2; exit 1 ;; \
    esac \
 && curl -fsSLo /tmp/node.tar.xz "https://nodejs.org/dist/v${NODE_VERSION}/node-v${NODE_VERSION}-linux-${node_arch}.tar.xz" \
 && echo "${sha}  /tmp/node.tar.xz" | sha256sum -c - \
 && tar -xJf /tmp/node.tar.xz -C /usr/local --strip-components=1 --no-same-owner \
 && rm /tmp/node.tar.xz \
 && node --version && npm --version

WORKDIR /src

# Dependencies first, so that a source change does not re-download them. --ignore-scripts: no dependency runs
# code at install time (the project has no install script; the addon is built explicitly below).
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund

COPY tsconfig.json CMakeLists.txt ./
COPY native/ native/
COPY cuda/ cuda/
COPY errors/ errors/
COPY producer/ producer/
COPY core/ core/
COPY worker/ worker/
COPY cli/ cli/
COPY api/ api/
COPY dashboard/ dashboard/
COPY bin/ bin/

RUN KMFLEET_CUDA_ARCHS="${KMFLEET_CUDA_ARCHS}" npm run build \
 && test -f build/Release/kmfleet_native.node \
 && npm prune --omit=dev --no-audit --no-fund

# ---------------------------------------------------------------------------------------------------------------
FROM nvidia/cuda:${CUDA_VERSION}-base-ubuntu${UBUNTU_VERSION}@${CUDA_BASE_DIGEST} AS run

ARG NODE_VERSION=22.22.2
LABEL org.opencontainers.image.title="kmfleet worker" \
      org.opencontainers.image.description="GPU worker for exact k-means clustering jobs (BullMQ, S3, CUDA)" \
      org.opencontainers.image.licenses="Apache-2.0"

# tini: PID 1 that forwards SIGTERM to node and reaps children. ca-certificates: TLS to S3 and rediss://.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends tini ca-certificates \
 && rm -rf /var/lib/apt/lists/*

# A fixed numeric uid/gid, so that Kubernetes' runAsNonRoot can verify it and volumes can be chowned to it.
# /var/cache/kmfleet is created owned by it: a new Docker named volume mounted there inherits that ownership.
RUN groupadd --system --gid 10001 kmfleet \
 && useradd --system --uid 10001 --gid kmfleet --home-dir /app --shell /usr/sbin/nologin kmfleet \
 && mkdir -p /var/cache/kmfleet \
 && chown kmfleet:kmfleet /var/cache/kmfleet

COPY --from=build /usr/local/bin/node /usr/local/bin/node

WORKDIR /app
COPY --from=build --chown=root:root /src/package.json ./package.json
COPY --from=build --chown=root:root /src/node_modules ./node_modules
COPY --from=build --chown=root:root /src/dist ./dist
COPY --from=build --chown=root:root /src/bin ./bin
# the dashboard's static page (kmfleet dashboard serves it from dashboard/static next to dist/)
COPY --from=build --chown=root:root /src/dashboard/static ./dashboard/static
COPY --from=build --chown=root:root /src/build/Release/kmfleet_native.node ./build/Release/kmfleet_native.node

# The NVIDIA container toolkit mounts the driver for these capabilities; nothing else from the host is needed.
# The dataset cache stays off unless KMFLEET_CACHE_DIR is set (compose and the k8s ConfigMap set it to
# /var/cache/kmfleet, on a volume): a cache in the container's writable layer would fill the node's disk.
ENV NODE_ENV=production \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    KMFLEET_METRICS_PORT=9464

USER 10001:10001
EXPOSE 9464

# /healthz of the metrics server (worker/metrics). Node's fetch: no curl in the image.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.KMFLEET_METRICS_PORT||9464)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]

STOPSIGNAL SIGTERM
ENTRYPOINT ["tini", "--", "node", "bin/kmfleet.js"]
CMD ["worker"]
