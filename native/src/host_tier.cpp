#include "host_tier.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace kmfleet {

HostTier::HostTier(std::int64_t firstRow, std::int64_t rows, std::int64_t chunkRows, std::size_t rowBytes)
    : first_(firstRow), rows_(rows), chunkRows_(std::max<std::int64_t>(1, chunkRows)), rowBytes_(rowBytes),
      heldEnd_(firstRow) {
  for (std::int64_t r = firstRow; r < firstRow + rows;) {
    Chunk c;
    c.begin = r;
    c.end = std::min(firstRow + rows, (r / chunkRows_ + 1) * chunkRows_);
    r = c.end;
    chunks_.push_back(std::move(c));
  }
  limit_ = static_cast<std::int64_t>(chunks_.size());
}

std::int64_t HostTier::chunkOf(std::int64_t row) const {
  return row / chunkRows_ - first_ / chunkRows_;
}

const void* HostTier::chunkAt(std::int64_t row, std::int64_t& count) const {
  if (row < first_ || row >= first_ + rows_) return nullptr;
  const Chunk& c = chunks_[static_cast<std::size_t>(chunkOf(row))];
  if (c.begin != row || c.filled != c.end - c.begin) return nullptr;
  count = c.end - c.begin;
  return c.block.data();
}

void HostTier::keep(Backend& backend, ThreadPool& pool, const void* src, std::int64_t row, std::int64_t count) {
  const std::int64_t lo = std::max(row, first_), hi = std::min(row + count, first_ + rows_);
  for (std::int64_t r = lo; r < hi;) {
    const std::int64_t i = chunkOf(r);
    if (i >= limit_) return;
    Chunk& c = chunks_[static_cast<std::size_t>(i)];
    const std::int64_t end = std::min(hi, c.end);
    if (r != c.begin + c.filled) {  // not where this chunk's filling stopped (held already, or a gap before it)
      r = end;
      continue;
    }
    if (!c.block.data()) {
      try {
        c.block = backend.allocateHostRows(static_cast<std::size_t>(c.end - c.begin) * rowBytes_, warning_);
      } catch (const EngineError& e) {
        if (e.code() != ErrorCode::OutOfMemory) throw;
        limit_ = i;
        warning_ = std::string(e.what()) + ": the host tier keeps " + std::to_string(c.begin - first_) + " of its " +
                   std::to_string(rows_) + " planned rows; the rest are fed by the caller every pass";
        return;
      }
    }
    const std::size_t bytes = static_cast<std::size_t>(end - r) * rowBytes_;
    char* dst = static_cast<char*>(c.block.data()) + static_cast<std::size_t>(c.filled) * rowBytes_;
    const char* from = static_cast<const char*>(src) + static_cast<std::size_t>(r - row) * rowBytes_;
    // on every thread: one thread's memcpy would be slower than the reads that fill the tier
    pool.run([&](int tid, int nt) {
      std::int64_t b, e;
      ThreadPool::range(static_cast<std::int64_t>(bytes), tid, nt, 4096, b, e);
      if (e > b) std::memcpy(dst + b, from + b, static_cast<std::size_t>(e - b));
    });
    c.filled += end - r;
    r = end;
  }
  while (heldEnd_ < first_ + rows_) {
    const Chunk& c = chunks_[static_cast<std::size_t>(chunkOf(heldEnd_))];
    if (c.filled != c.end - c.begin) break;
    heldEnd_ = c.end;
  }
}

// Backend's default (backend.h): every held chunk through processChunk, as if fed.
std::int64_t Backend::processHostTier(const HostTier& tier, std::int64_t from, std::int64_t upTo,
                                      const std::atomic<bool>& cancel) {
  std::int64_t row = from, n = 0;
  while (row < upTo) {
    const void* rows = tier.chunkAt(row, n);
    if (!rows) break;
    if (cancel.load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
    processChunk(rows, row, n);
    row += n;
  }
  return row;
}

}  // namespace kmfleet
