// The device slots of streamed chunks (chunk_slots.h): allocation, release, the farthest-row buffers.
#include "chunk_slots.h"

#include <algorithm>

#include "device_memory.h"

namespace kmfleet {
namespace cuda_backend {

void ChunkSlots::allocate(int count, std::size_t chunk, std::size_t rowBytes) {
  slots_.resize(std::size_t(count));
  for (ChunkSlot& s : slots_) {
    s.raw = devAlloc<char>(chunk * rowBytes, "chunk slots");
    s.labels = devAlloc<int>(chunk, "chunk slots");
    s.dist32 = devAlloc<float>(chunk, "chunk slots");
    s.hLabels = hostAlloc<int>(chunk, "label staging");
    s.hDist = hostAlloc<float>(chunk, "distance staging");
    for (cudaEvent_t* e : {&s.copied, &s.rawFree, &s.outDone, &s.computed})
      check(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreate");
  }
}

void ChunkSlots::release() noexcept {
  for (ChunkSlot& s : slots_) {
    for (void* p : {s.raw, static_cast<void*>(s.labels), static_cast<void*>(s.dist32), static_cast<void*>(s.topDist),
                    static_cast<void*>(s.topRow), static_cast<void*>(s.topValues)})
      if (p) cudaFree(p);
    for (void* p : {static_cast<void*>(s.hLabels), static_cast<void*>(s.hDist), static_cast<void*>(s.hTopDist),
                    static_cast<void*>(s.hTopRow), static_cast<void*>(s.hTopValues)})
      if (p) cudaFreeHost(p);
    for (cudaEvent_t e : {s.copied, s.rawFree, s.outDone, s.computed})
      if (e) cudaEventDestroy(e);
    s = ChunkSlot{};
  }
}

void ChunkSlots::growFar(int f, int d) {
  const int cap = std::max(f, farCapacity_);
  // every old buffer freed and forgotten before the first new allocation: one that throws (OutOfMemory) leaves
  // null pointers and the old capacity, never freed ones that a later pass or release() would use again
  for (ChunkSlot& t : slots_) {
    for (void* p : {static_cast<void*>(t.topDist), static_cast<void*>(t.topRow), static_cast<void*>(t.topValues)})
      if (p) cudaFree(p);
    for (void* p : {static_cast<void*>(t.hTopDist), static_cast<void*>(t.hTopRow), static_cast<void*>(t.hTopValues)})
      if (p) cudaFreeHost(p);
    t.topDist = nullptr; t.topRow = nullptr; t.topValues = nullptr;
    t.hTopDist = nullptr; t.hTopRow = nullptr; t.hTopValues = nullptr;
  }
  farCapacity_ = 0;
  for (ChunkSlot& t : slots_) {
    t.topDist = devAlloc<double>(cap, "farthest rows");
    t.topRow = devAlloc<long long>(cap, "farthest rows");
    t.topValues = devAlloc<float>(std::size_t(cap) * d, "farthest rows");
    t.hTopDist = hostAlloc<double>(cap, "farthest rows");
    t.hTopRow = hostAlloc<long long>(cap, "farthest rows");
    t.hTopValues = hostAlloc<float>(std::size_t(cap) * d, "farthest rows");
  }
  farCapacity_ = cap;
}

}  // namespace cuda_backend
}  // namespace kmfleet
