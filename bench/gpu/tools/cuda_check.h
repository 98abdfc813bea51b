// CK(call): the standalone tools' CUDA error check — print the error, where, and the call, then exit(2). (The
// backend maps errors to EngineError instead: cuda_backend.h check().)
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                                \
  do {                                                                                                       \
    cudaError_t e_ = (x);                                                                                    \
    if (e_ != cudaSuccess) {                                                                                 \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
      std::exit(2);                                                                                          \
    }                                                                                                        \
  } while (0)
