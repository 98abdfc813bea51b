// The CUDA backend's four streams: the streamed chunks' copies up, the kernels, the copies down to pinned staging, and
// the chunk stream that streamed chunks of a partly resident pass run on beside the resident rows.
#pragma once

#include <cuda_runtime.h>

#include "device_memory.h"

namespace kmfleet {
namespace cuda_backend {

struct BackendStreams {
  cudaStream_t copy = nullptr;     // H2D of streamed chunks
  cudaStream_t compute = nullptr;  // the kernels, the centroids up, the totals down
  cudaStream_t d2h = nullptr;      // labels, distances and farthest candidates down to the pinned staging
  cudaStream_t chunk = nullptr;    // streamed chunks beside the resident rows (overlap_partials.h)

  void create() {
    check(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&d2h, cudaStreamNonBlocking), "cudaStreamCreate");
    // ahead of the resident rows' pending blocks: a streamed chunk's slot frees sooner
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    check(cudaStreamCreateWithPriority(&chunk, cudaStreamNonBlocking, greatest), "cudaStreamCreate");
  }
  // Every stream's work done, errors dropped (abortPass).
  void synchronizeQuietly() noexcept {
    cudaStreamSynchronize(copy);
    cudaStreamSynchronize(chunk);
    cudaStreamSynchronize(compute);
    cudaStreamSynchronize(d2h);
    cudaGetLastError();
  }
  void destroy() noexcept {
    for (cudaStream_t s : {copy, compute, d2h, chunk})
      if (s) cudaStreamDestroy(s);
    copy = compute = d2h = chunk = nullptr;
  }
};

}  // namespace cuda_backend
}  // namespace kmfleet
