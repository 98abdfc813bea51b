// Rows read straight from a local file (Engine feedFile): the rows of a pass that no tier holds, read on every pass.
// Many positional reads of about 1 MiB run at once on the engine's pool — one thread copies from the page cache at a
// fraction of what the page cache serves — and a job that narrows its rows (row_narrowing.h) rounds each piece as it
// lands. A backend that takes chunks in pieces (Backend::processChunkInPieces) reads them into its small page-locked
// buffers; any other gets the chunk whole (readAll).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend.h"
#include "row_narrowing.h"
#include "thread_pool.h"

namespace kmfleet {

class FileRows final : public ChunkPieces {
 public:
  // The chunk of rows [firstRow, firstRow + rows) that starts at byte `offset` of the open file `fd`, each row `dims`
  // values of the caller's type (fileRowBytes), kept as `narrowing` says.
  FileRows(int fd, std::int64_t offset, std::size_t fileRowBytes, const RowNarrowing& narrowing, std::int64_t dims,
           std::int64_t firstRow, std::int64_t rows);

  // about 1 MiB of whole rows as the backend keeps them
  std::int64_t pieceRows() const override { return pieceRows_; }
  void read(void* dst, std::int64_t first, std::int64_t count) const override;
  // Every row of the chunk into dst, in pieces on the pool's threads.
  void readAll(ThreadPool& pool, void* dst) const;

 private:
  int fd_;
  std::int64_t offset_;
  std::size_t fileRowBytes_, keptRowBytes_;
  const RowNarrowing& narrowing_;
  std::int64_t dims_, firstRow_, rows_, pieceRows_;
};

}  // namespace kmfleet
