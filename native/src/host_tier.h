// The engine's host tier: the rows after the backend's resident ones, kept in host memory in the backend's dtype the first
// time a pass feeds them, so that later passes hand them to the backend from here (at the link's speed on CUDA:
// page-locked blocks) and only the rows past them come from the caller's source — a file, a cache, S3.
//
// Rows [firstRow, firstRow + rows) are cut into chunks on the grid of the caller's feeds (multiples of chunkRows; the
// first chunk shorter when the resident rows end off the grid), one block each, allocated as it is first filled.
// Feeds fill the chunks they overlap, each from where its filling stopped, so a feed of any start and length keeps
// what it can; a chunk is held once it is full. Later passes hand the backend whole held chunks, on the same grid as
// the feeds (some backends' sums are bitwise only for a given chunking). When host memory runs out the tier stops
// growing where it is: the rows past it stay the caller's to feed, and nothing fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend.h"
#include "thread_pool.h"

namespace kmfleet {

class HostTier {
 public:
  HostTier() = default;
  HostTier(std::int64_t firstRow, std::int64_t rows, std::int64_t chunkRows, std::size_t rowBytes);

  std::int64_t firstRow() const { return first_; }
  std::int64_t plannedRows() const { return rows_; }
  // where the chunks held contiguously from firstRow end (firstRow when none is held)
  std::int64_t heldEnd() const { return heldEnd_; }
  std::int64_t heldRows() const { return heldEnd_ - first_; }

  // The held chunk that starts at `row` and its row count; nullptr when it is not held.
  const void* chunkAt(std::int64_t row, std::int64_t& count) const;

  // Keeps what it can of rows [row, row + count) at `src` (a fed chunk), copying on the pool's threads: each chunk it
  // overlaps takes the rows that continue its filling. Without memory `warning()` says why and the tier keeps no more.
  void keep(Backend& backend, ThreadPool& pool, const void* src, std::int64_t row, std::int64_t count);

  // Set when the tier is not what was planned: its blocks are not page-locked, or it stopped growing.
  const std::string& warning() const { return warning_; }

 private:
  struct Chunk {
    std::int64_t begin = 0, end = 0;  // rows
    std::int64_t filled = 0;          // rows [begin, begin + filled) are in the block
    HostBlock block;
  };
  std::int64_t chunkOf(std::int64_t row) const;  // the chunk holding `row` (inside the tier)

  std::int64_t first_ = 0, rows_ = 0, chunkRows_ = 1;
  std::size_t rowBytes_ = 0;
  std::int64_t limit_ = 0;  // chunks the tier may hold (lowered when memory runs out)
  std::vector<Chunk> chunks_;
  std::int64_t heldEnd_ = 0;
  std::string warning_;
};

}  // namespace kmfleet
