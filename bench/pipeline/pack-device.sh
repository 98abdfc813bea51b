#!/usr/bin/env bash
# Packs what bench/pipeline/run.mjs needs on the GPU machine (CUDA, no Node, npm or network) into .device/pipeline/:
# the compiled dist/ and the node_modules closure of the worker, the SDK and s3rver. The addon and Node + Redis come
# from scripts/gpu-pack's .device/ (kmfleet_native.node.xz, runtime.tar.xz). Then, with the device tool
# (carry [".device/pipeline", ".device/runtime.tar.xz", ".device/kmfleet_native.node.xz"]):
#   mkdir -p /tmp/rt && tar -xJf .device/runtime.tar.xz -C /tmp/rt && export PATH=/tmp/rt/bin:$PATH
#   xz -d .device/kmfleet_native.node.xz
#   tar -xJf .device/pipeline/pack.tar.xz && KMFLEET_ADDON=$PWD/.device/kmfleet_native.node node bench/pipeline/run.mjs --backend cuda
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.device/pipeline
mkdir -p "$out"
npm run --silent build:ts
node scripts/module-closure.cjs bullmq bullmq-otel @opentelemetry/api ioredis @aws-sdk/client-s3 s3rver pino zod commander prom-client yaml hyparquet @uwdata/flechette >"$out/files.list"
find dist -type f -name '*.js' >>"$out/files.list"
echo package.json >>"$out/files.list"
tar -cf - -T "$out/files.list" | xz -T2 -6 >"$out/pack.tar.xz"
du -ch "$out/pack.tar.xz" .device/runtime.tar.xz .device/kmfleet_native.node.xz
