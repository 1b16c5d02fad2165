#pragma once
// What a benchmark report records about where and how it ran: the machine,
// the bundled files it found, the command line, the time, the checkout, the
// models.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"

namespace parspec {

struct MachineInfo {
  std::string cpu_model;
  int cores = 0;             // cores this process may run on
  int64_t memory_bytes = 0;  // MemTotal
  int threads = 0;           // target threads used
  int threads_draft = 0;     // draft threads used
};

// "model name" of the first processor in /proc/cpuinfo text ("" if absent).
std::string parse_cpu_model(std::string_view cpuinfo);
// MemTotal of /proc/meminfo text in bytes (0 if absent).
int64_t parse_mem_total(std::string_view meminfo);
// This machine (threads left at 0 for the caller to fill).
MachineInfo read_machine_info();

// Comma-separated items, trimmed, blanks and repeats dropped, order kept.
std::vector<std::string> split_list(const std::string& text);
// `relative` (e.g. "models/target.gguf") looked for from the working directory,
// then from the executable's directory upwards; "" when not found.
std::string find_bundled(const std::string& relative);
// The command line as a shell would take it back ("parspec" + quoted arguments).
std::string command_line(int argc, char** argv);
// The current time, ISO 8601 in UTC.
std::string utc_now();
// Adds git_commit and git_dirty when the executable was built in a checkout.
void add_git_info(nlohmann::ordered_json& config);
// Path, name, architecture, sizes of a model file.
nlohmann::ordered_json describe_model(const std::string& path, const Model& model);
// Writes `text` to `path`; throws Error when that fails.
void write_output(const std::string& path, const std::string& text);

}  // namespace parspec
