#!/bin/sh
# Builds bench/cpu/phases.cpp against the CPU backend's sources with the addon's flags, into build-cpu/phases.
set -e
cd "$(dirname "$0")/../.."
S=native/src
mkdir -p build-cpu/phases-obj
F="-O3 -std=c++17 -fno-math-errno -ffp-contract=off -I$S -pthread"
g++ $F -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx2 -mfma -mf16c -Wno-maybe-uninitialized -c $S/cpu/kernels_avx512.cpp -o build-cpu/phases-obj/k512.o &
g++ $F -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512bf16 -mavx2 -mfma -Wno-maybe-uninitialized -c $S/cpu/kernels_avx512bf16.cpp -o build-cpu/phases-obj/kbf.o &
g++ $F -mavx2 -mfma -mf16c -c $S/cpu/kernels_avx2.cpp -o build-cpu/phases-obj/k2.o
wait
g++ $F bench/cpu/phases.cpp $S/cpu/assign.cpp $S/cpu/accumulate.cpp $S/cpu/exact_statistics.cpp $S/cpu/row_bounds.cpp $S/cpu/kernels_generic.cpp $S/thread_pool.cpp \
  build-cpu/phases-obj/k512.o build-cpu/phases-obj/kbf.o build-cpu/phases-obj/k2.o -o build-cpu/phases
