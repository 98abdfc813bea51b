#include "file_rows.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace kmfleet {

namespace {

constexpr std::size_t kPieceBytes = std::size_t(1) << 20;

// `bytes` of fd from `offset` into dst: whole rows of rowBytes from row firstRow, which an error names
void readFully(int fd, char* dst, std::size_t bytes, std::int64_t offset, std::int64_t firstRow, std::size_t rowBytes) {
  const std::int64_t start = offset;
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, dst, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    const std::string row = std::to_string(firstRow + (offset - start) / static_cast<std::int64_t>(rowBytes));
    if (n < 0)
      throw EngineError(ErrorCode::InvalidArgument, "reading row " + row + " from the rows' file at byte " +
                                                        std::to_string(offset) + ": " + std::strerror(errno));
    if (n == 0)
      throw EngineError(ErrorCode::InvalidArgument, "the rows' file ends at byte " + std::to_string(offset) +
                                                        ", before the end of row " + row + " (was it cut short while the job ran?)");
    dst += n;
    bytes -= static_cast<std::size_t>(n);
    offset += n;
  }
}

}  // namespace

FileRows::FileRows(int fd, std::int64_t offset, std::size_t fileRowBytes, const RowNarrowing& narrowing,
                   std::int64_t dims, std::int64_t firstRow, std::int64_t rows)
    : fd_(fd), offset_(offset), fileRowBytes_(fileRowBytes),
      keptRowBytes_(narrowing.active() ? static_cast<std::size_t>(dims) * 2 : fileRowBytes), narrowing_(narrowing),
      dims_(dims), firstRow_(firstRow), rows_(rows),
      pieceRows_(std::max<std::int64_t>(1, static_cast<std::int64_t>(kPieceBytes / keptRowBytes_))) {}

void FileRows::read(void* dst, std::int64_t first, std::int64_t count) const {
  const std::int64_t at = offset_ + first * static_cast<std::int64_t>(fileRowBytes_);
  const std::size_t bytes = static_cast<std::size_t>(count) * fileRowBytes_;
  if (!narrowing_.active()) return readFully(fd_, static_cast<char*>(dst), bytes, at, firstRow_ + first, fileRowBytes_);
  // the fp32 rows land in this thread's scratch (in its cache) and are rounded into dst
  thread_local std::vector<float> wide;
  wide.resize(static_cast<std::size_t>(count * dims_));
  readFully(fd_, reinterpret_cast<char*>(wide.data()), bytes, at, firstRow_ + first, fileRowBytes_);
  narrowing_.narrowHere(wide.data(), dst, firstRow_ + first, count);
}

void FileRows::readAll(ThreadPool& pool, void* dst) const {
  const std::int64_t pieces = (rows_ + pieceRows_ - 1) / pieceRows_;
  pool.forEachInOrder(pieces, [&](int, std::int64_t i) {
    const std::int64_t first = i * pieceRows_, count = std::min(pieceRows_, rows_ - first);
    read(static_cast<char*>(dst) + static_cast<std::size_t>(first) * keptRowBytes_, first, count);
  });
}

}  // namespace kmfleet
