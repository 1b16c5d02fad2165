// The SIGBUS handler reads a fixed table of ranges with atomics only: a
// signal handler may not lock or allocate.
#include "model/mapped_file_guard.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace parspec {

namespace {

struct GuardedRange {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<size_t> message_size{0};
  std::array<char, 1024> message{};  // the whole line written on a fault
  std::atomic<bool> used{false};
};

constexpr size_t kSlots = 256;  // more mapped model files at once than any run opens
std::array<GuardedRange, kSlots> guarded;
struct sigaction previous_action {};

void write_all(const char* text, size_t n) {
  while (n > 0) {
    const ssize_t wrote = ::write(STDERR_FILENO, text, n);
    if (wrote <= 0) return;
    text += wrote;
    n -= static_cast<size_t>(wrote);
  }
}

void on_sigbus(int signal, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const GuardedRange& range : guarded) {
    if (address < range.begin.load(std::memory_order_acquire) ||
        address >= range.end.load(std::memory_order_acquire))
      continue;
    write_all(range.message.data(), range.message_size.load(std::memory_order_acquire));
    ::_exit(1);
  }
  // Not a model file's page: the previous handler, or the default action (the
  // faulting instruction runs again and raises the signal once more).
  if ((previous_action.sa_flags & SA_SIGINFO) != 0 && previous_action.sa_sigaction != nullptr) {
    previous_action.sa_sigaction(signal, info, context);
    return;
  }
  if (previous_action.sa_handler != SIG_DFL && previous_action.sa_handler != SIG_IGN &&
      previous_action.sa_handler != nullptr) {
    previous_action.sa_handler(signal);
    return;
  }
  struct sigaction restore {};
  restore.sa_handler = SIG_DFL;
  sigemptyset(&restore.sa_mask);
  sigaction(SIGBUS, &restore, nullptr);
}

void install_handler() {
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &previous_action);
}

}  // namespace

MappedFileGuard::MappedFileGuard(const void* begin, size_t size, const std::string& path) {
  static std::once_flag installed;
  std::call_once(installed, install_handler);
  const std::string line = "error: " + path +
                           ": the model file changed while in use (truncated or rewritten); "
                           "its weights can no longer be read\n";
  for (size_t i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (!guarded[i].used.compare_exchange_strong(expected, true)) continue;
    const size_t n = std::min(line.size(), guarded[i].message.size());
    std::memcpy(guarded[i].message.data(), line.data(), n);
    guarded[i].message_size.store(n, std::memory_order_release);
    const auto first = reinterpret_cast<uintptr_t>(begin);
    guarded[i].end.store(first + size, std::memory_order_release);
    guarded[i].begin.store(first, std::memory_order_release);
    slot_ = static_cast<int>(i);
    return;
  }
  // Every slot taken: the file stays mapped unguarded (a fault is a signal, as before).
}

MappedFileGuard::~MappedFileGuard() {
  if (slot_ < 0) return;
  GuardedRange& range = guarded[static_cast<size_t>(slot_)];
  range.begin.store(0, std::memory_order_release);
  range.end.store(0, std::memory_order_release);
  range.used.store(false, std::memory_order_release);
}

}  // namespace parspec
