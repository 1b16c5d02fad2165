#pragma once
// What a benchmark report records about where and how it ran: the bundled
// files it found, the command line, the time, the checkout, the models.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"

namespace parspec {

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
