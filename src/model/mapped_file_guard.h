#pragma once
// A memory-mapped file that shrinks under the process (truncated, or rewritten
// by a program that truncates first) turns a read of its lost pages into
// SIGBUS. While a guard lives, such a fault inside its range ends the process
// with exit code 1 and a message naming the file, instead of the signal; a
// fault anywhere else goes to the handler that was there before (a crash stays
// a crash, sanitizers still report theirs).
#include <cstddef>
#include <string>

namespace parspec {

class MappedFileGuard {
 public:
  MappedFileGuard() = default;
  MappedFileGuard(const void* begin, size_t size, const std::string& path);
  ~MappedFileGuard();
  MappedFileGuard(const MappedFileGuard&) = delete;
  MappedFileGuard& operator=(const MappedFileGuard&) = delete;

 private:
  int slot_ = -1;  // index in the process-wide table, -1 when it guards nothing
};

}  // namespace parspec
