// Default run-time options of the sanitizer builds (-DPARSPEC_SANITIZE=address|thread), linked
// into every executable so that the tests, the parspec processes they start and the ranks that
// mpirun starts all get them without environment variables. ASAN_OPTIONS, UBSAN_OPTIONS,
// LSAN_OPTIONS and TSAN_OPTIONS still override them. The suppression files name third-party
// libraries only; each entry says why.
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>

#ifndef PARSPEC_SANITIZER_DIR
#error "PARSPEC_SANITIZER_DIR (the folder of the suppression files) must be defined"
#endif

namespace {

// Whether mpirun started this process (OMPI_COMM_WORLD_SIZE is set). The sanitizer asks for its
// options before the C library has set up the environment, when getenv finds nothing, and
// before its own interceptors are ready: /proc/self/environ is read with raw system calls, in
// code without sanitizer instrumentation (which would call into the runtime not yet started).
__attribute__((no_sanitize("address", "undefined", "thread"))) bool started_by_mpirun() {
  static constexpr char kName[] = "OMPI_COMM_WORLD_SIZE=";
  constexpr size_t kLength = sizeof kName - 1;
  const long fd = syscall(SYS_openat, AT_FDCWD, "/proc/self/environ", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[4096];
  size_t matched = 0;  // bytes of kName matched at the start of this entry; kLength + 1: no match
  bool found = false;
  for (long n; !found && (n = syscall(SYS_read, fd, buffer, sizeof buffer)) > 0;) {
    for (long i = 0; i < n && !found; ++i) {
      if (buffer[i] == '\0') {
        matched = 0;  // the next entry starts
      } else if (matched < kLength && buffer[i] == kName[matched]) {
        found = ++matched == kLength;
      } else {
        matched = kLength + 1;
      }
    }
  }
  syscall(SYS_close, fd);
  return found;
}

}  // namespace

// A report exits with code 86, which no parspec command uses: a test that expects a command to
// fail with exit code 1 (bad input) still fails when the sanitizer stopped it.
extern "C" {
const char* __asan_default_options() {
  // Under mpirun, Open MPI allocates from components it loads and unloads itself, built without
  // frame pointers: only the slow unwinder reaches the libmpi frames above those allocations,
  // which lsan.supp names (the fast one stops at an unknown module).
  if (started_by_mpirun())
    return "exitcode=86:detect_stack_use_after_return=1:check_initialization_order=1:"
           "fast_unwind_on_malloc=0";
  return "exitcode=86:detect_stack_use_after_return=1:check_initialization_order=1";
}
// Undefined behaviour stops the process with a stack trace, so that the test fails there.
const char* __ubsan_default_options() {
  return "exitcode=86:print_stacktrace=1:halt_on_error=1";
}
const char* __lsan_default_options() {
  return "suppressions=" PARSPEC_SANITIZER_DIR "/lsan.supp:print_suppressions=0";
}
const char* __tsan_default_options() {
  return "exitcode=86:suppressions=" PARSPEC_SANITIZER_DIR
         "/tsan.supp:second_deadlock_stack=1:print_suppressions=0";
}
}
