#pragma once
// Runs the built parspec binary (PARSPEC_BINARY, defined for the test suite)
// for the command-line tests.
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace parspec::testing_support {

struct CommandResult {
  int exit_code;
  std::string output;  // stdout (and stderr when merged)
};

// Runs a shell command line and collects its stdout and exit code (-1 when it
// could not start or ended by a signal).
inline CommandResult run_command(const std::string& command) {
  CommandResult r{-1, ""};
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// `args` are already shell-quoted; stderr is merged into the output or dropped.
inline CommandResult run_parspec(const std::string& args, bool merge_stderr = false) {
  return run_command(std::string(PARSPEC_BINARY) + " " + args +
                     (merge_stderr ? " 2>&1" : " 2>/dev/null"));
}

}  // namespace parspec::testing_support
