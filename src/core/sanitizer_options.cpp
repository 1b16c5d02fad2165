// Default run-time options of the sanitizer builds (-DPARSPEC_SANITIZE=address|thread), linked
// into every executable so that the tests, the parspec processes they start and the ranks that
// mpirun starts all get them without environment variables. ASAN_OPTIONS, UBSAN_OPTIONS,
// LSAN_OPTIONS and TSAN_OPTIONS still override them. The suppression files name third-party
// libraries only; each entry says why.
#include <cstdlib>

#ifndef PARSPEC_SANITIZER_DIR
#error "PARSPEC_SANITIZER_DIR (the folder of the suppression files) must be defined"
#endif

extern "C" {
const char* __asan_default_options() {
  // Under mpirun, Open MPI allocates from components it loads and unloads itself, built without
  // frame pointers: only the slow unwinder reaches the libmpi frames above those allocations,
  // which lsan.supp names (the fast one stops at an unknown module).
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr)
    return "detect_stack_use_after_return=1:check_initialization_order=1:fast_unwind_on_malloc=0";
  return "detect_stack_use_after_return=1:check_initialization_order=1";
}
// Undefined behaviour stops the process with a stack trace, so that the test fails there.
const char* __ubsan_default_options() {
  return "print_stacktrace=1:halt_on_error=1";
}
const char* __lsan_default_options() {
  return "suppressions=" PARSPEC_SANITIZER_DIR "/lsan.supp:print_suppressions=0";
}
const char* __tsan_default_options() {
  return "suppressions=" PARSPEC_SANITIZER_DIR
         "/tsan.supp:second_deadlock_stack=1:print_suppressions=0";
}
}
