#include "bench/environment.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/text_format.h"
#include "core/error.h"
#include "core/worker.h"

namespace parspec {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// The bundled models and prompt sets live in the source tree; look for them
// from the working directory first, then from the executable's directory
// upwards (a build directory inside the checkout).
std::vector<fs::path> search_roots() {
  std::vector<fs::path> roots = {fs::current_path()};
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    for (fs::path dir = exe.parent_path(); !dir.empty() && roots.size() < 6;
         dir = dir.parent_path()) {
      roots.push_back(dir);
      if (dir == dir.root_path()) break;
    }
  return roots;
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_./=,:+") == std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string run_command(const std::string& command) {
  std::string out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, pipe)) out += buf;
    pclose(pipe);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

}  // namespace

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    const size_t b = item.find_first_not_of(" \t");
    const size_t e = item.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    item = item.substr(b, e - b + 1);
    if (std::find(items.begin(), items.end(), item) == items.end()) items.push_back(item);
  }
  return items;
}

std::string find_bundled(const std::string& relative) {
  for (const fs::path& root : search_roots())
    if (fs::exists(root / relative)) return (root / relative).string();
  return "";
}

// Commit of the checkout the executable was built in, if it is one.
void add_git_info(ojson& config) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return;
  const std::string git = "git -C " + shell_quote(exe.parent_path().string()) + " ";
  const std::string commit = run_command(git + "rev-parse HEAD 2>/dev/null");
  if (commit.size() != 40) return;
  config["git_commit"] = commit;
  config["git_dirty"] =
      !run_command(git + "status --porcelain --untracked-files=no 2>/dev/null").empty();
}

ojson describe_model(const std::string& path, const Model& model) {
  const ModelConfig& c = model.config();
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  return {{"path", path},
          {"name", c.name},
          {"arch", c.arch},
          {"n_layer", c.n_layer},
          {"n_embd", c.n_embd},
          {"n_vocab", c.n_vocab},
          {"file_bytes", ec ? 0 : static_cast<int64_t>(bytes)}};
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void write_output(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  check(out.good(), "cannot write '", path, "'");
  out << text;
  out.close();
  check(out.good(), "error while writing '", path, "'");
}

std::string command_line(int argc, char** argv) {
  std::string command = "parspec";
  for (int i = 1; i < argc; ++i) {
    command += ' ';
    command += shell_quote(argv[i]);
  }
  return command;
}

std::string parse_cpu_model(std::string_view cpuinfo) {
  while (!cpuinfo.empty()) {
    const size_t end = cpuinfo.find('\n');
    const std::string_view line = cpuinfo.substr(0, end);
    cpuinfo.remove_prefix(end == std::string_view::npos ? cpuinfo.size() : end + 1);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    if (trim(line.substr(0, colon)) == "model name")
      return std::string(trim(line.substr(colon + 1)));
  }
  return "";
}

int64_t parse_mem_total(std::string_view meminfo) {
  const size_t at = meminfo.find("MemTotal:");
  if (at == std::string_view::npos) return 0;
  std::string_view rest = meminfo.substr(at + 9);
  rest = rest.substr(0, rest.find('\n'));
  std::istringstream in{std::string(rest)};
  int64_t value = 0;
  std::string unit;
  if (!(in >> value)) return 0;
  in >> unit;
  return unit == "kB" ? value * 1024 : value;
}

MachineInfo read_machine_info() {
  const auto slurp = [](const char* path) {
    std::ifstream in(path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  MachineInfo info;
  info.cpu_model = parse_cpu_model(slurp("/proc/cpuinfo"));
  info.memory_bytes = parse_mem_total(slurp("/proc/meminfo"));
  info.cores = available_cores();
  return info;
}

}  // namespace parspec
