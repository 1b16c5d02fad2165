// Default run-time options of the sanitizer builds (-DPARSPEC_SANITIZE=address|thread), linked
// into every executable so that the tests, the parspec processes they start and the ranks that
// mpirun starts all get them without environment variables. ASAN_OPTIONS, UBSAN_OPTIONS,
// LSAN_OPTIONS and TSAN_OPTIONS still override them. The suppression files name third-party
// libraries only; each entry says why.
#ifndef PARSPEC_SANITIZER_DIR
#error "PARSPEC_SANITIZER_DIR (the folder of the suppression files) must be defined"
#endif

extern "C" {
// Stop at the first report with a non-zero exit code, so that ctest fails.
const char* __asan_default_options() {
  return "detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1";
}
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
