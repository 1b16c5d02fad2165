#include "bench/report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/worker.h"

namespace parspec {

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string_view trim(std::string_view s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; the
// part after it is what a user can act on.
std::string json_error_text(const std::exception& e) {
  std::string_view what = e.what();
  if (auto close = what.find("] "); close != std::string_view::npos) what.remove_prefix(close + 2);
  return std::string(what);
}

std::string format(const char* fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, value);
  return buf;
}

// Keeps JSON numbers readable (no 17-digit timings) without losing anything
// that the measurement noise does not already swamp.
double rounded(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

std::string pad(std::string text, size_t width, bool right_align) {
  if (text.size() >= width) return text;
  const std::string fill(width - text.size(), ' ');
  return right_align ? fill + text : text + fill;
}

std::string xml_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string markdown_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string speedup_text(const BenchResult& r) {
  return r.speedup > 0 ? format("%.2fx", r.speedup) : "-";
}

std::string alpha_text(const BenchResult& r) {
  return r.drafted > 0 ? format("%.3f", r.alpha()) : "-";
}

std::string exactness_text(const BenchResult& r, bool checked) {
  if (!checked || r.checked == 0) return "-";
  if (r.mismatches == 0) return "yes";
  return "NO (" + std::to_string(r.mismatches) + "/" + std::to_string(r.checked) + ")";
}

std::string positions_text(const BenchResult& r, const char* separator) {
  const std::vector<double> rates = r.position_acceptance();
  if (rates.empty()) return "-";
  std::string out;
  for (size_t i = 0; i < rates.size(); ++i) {
    if (i) out += separator;
    out += format("%.2f", rates[i]);
  }
  return out;
}

}  // namespace

std::vector<std::string> parse_prompt_lines(std::string_view text, const std::string& source) {
  std::vector<std::string> prompts;
  size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t end = text.find('\n');
    const std::string_view line = trim(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (line.empty()) continue;
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      fail(source, ":", line_number, ": not a valid JSON line (", json_error_text(e), ")");
    }
    check(value.is_object(), source, ":", line_number,
          ": expected a JSON object such as {\"prompt\": \"...\"}");
    const auto it = value.find("prompt");
    check(it != value.end(), source, ":", line_number, ": the object has no \"prompt\" key");
    check(it->is_string(), source, ":", line_number, ": \"prompt\" must be a string");
    std::string prompt = it->get<std::string>();
    check(!prompt.empty(), source, ":", line_number, ": \"prompt\" is empty");
    prompts.push_back(std::move(prompt));
  }
  check(!prompts.empty(), source, ": no prompts (expected one {\"prompt\": \"...\"} per line)");
  return prompts;
}

PromptSet load_prompt_set(const std::string& spec, const std::string& prompts_dir) {
  check(!spec.empty(), "empty prompt set name");
  const bool is_path =
      spec.find('/') != std::string::npos || fs::path(spec).extension() == ".jsonl";
  PromptSet set;
  if (is_path) {
    set.path = spec;
    check(fs::is_regular_file(set.path), "cannot open prompt file '", set.path, "'");
  } else {
    set.path = (fs::path(prompts_dir) / (spec + ".jsonl")).string();
    if (!fs::is_regular_file(set.path)) {
      std::vector<std::string> known;
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(prompts_dir, ec))
        if (entry.path().extension() == ".jsonl") known.push_back(entry.path().stem().string());
      std::sort(known.begin(), known.end());
      std::string known_text;
      for (const auto& k : known) known_text += (known_text.empty() ? "" : ", ") + k;
      fail("unknown prompt set '", spec, "': no file ", set.path,
           known.empty() ? std::string(" (and no sets in that directory)")
                         : " (known sets: " + known_text + ")",
           "; give a set name or a path to a .jsonl file");
    }
  }
  std::ifstream in(set.path, std::ios::binary);
  check(in.good(), "cannot open prompt file '", set.path, "'");
  std::ostringstream contents;
  contents << in.rdbuf();
  set.name = fs::path(set.path).stem().string();
  set.prompts = parse_prompt_lines(contents.str(), set.path);
  set.chat = set.name == "chat";
  return set;
}

std::vector<double> BenchResult::position_acceptance() const {
  std::vector<double> rates(position_proposed.size(), 0.0);
  for (size_t i = 0; i < rates.size(); ++i) {
    const int64_t hits = i < position_accepted.size() ? position_accepted[i] : 0;
    if (position_proposed[i] > 0) rates[i] = static_cast<double>(hits) / position_proposed[i];
  }
  return rates;
}

namespace {

void add_run(BenchResult& r, const BenchRun& run) {
  const GenerationStats& s = run.stats;
  ++r.runs;
  r.n_prompt += s.n_prompt;
  r.n_gen += s.n_gen;
  r.t_prompt_ms += s.t_prompt_ms;
  r.t_gen_ms += s.t_gen_ms;
  r.drafted += s.drafted;
  r.accepted += s.accepted;
  r.verify_steps += s.verify_steps;
  r.target_forwards += s.target_forwards;
  r.draft_forwards += s.draft_forwards;
  r.t_draft_ms_total += s.t_draft_ms;
  r.t_verify_ms_total += s.t_verify_ms;
  const auto& proposed = s.per_position.proposed;
  const auto& accepted = s.per_position.accepted;
  const size_t n = std::max(proposed.size(), accepted.size());
  if (r.position_proposed.size() < n) {
    r.position_proposed.resize(n, 0);
    r.position_accepted.resize(n, 0);
  }
  for (size_t i = 0; i < proposed.size(); ++i) r.position_proposed[i] += proposed[i];
  for (size_t i = 0; i < accepted.size(); ++i) r.position_accepted[i] += accepted[i];
  if (run.checked) {
    ++r.checked;
    if (!run.matches_ar) ++r.mismatches;
  }
}

}  // namespace

std::vector<BenchResult> aggregate_runs(std::span<const BenchRun> runs,
                                        std::span<const std::string> strategies,
                                        std::span<const std::string> sets) {
  std::vector<std::string> groups(sets.begin(), sets.end());
  if (sets.size() > 1) groups.emplace_back(kAllSets);
  std::map<std::pair<std::string, std::string>, BenchResult> by_key;
  for (const BenchRun& run : runs) {
    if (std::find(strategies.begin(), strategies.end(), run.strategy) == strategies.end()) continue;
    if (std::find(sets.begin(), sets.end(), run.prompt_set) == sets.end()) continue;
    add_run(by_key[{run.strategy, run.prompt_set}], run);
    if (sets.size() > 1) add_run(by_key[{run.strategy, std::string(kAllSets)}], run);
  }
  std::vector<BenchResult> results;
  for (const std::string& group : groups) {
    const auto ar = by_key.find({reference_strategy_name(), group});
    const double ar_speed = ar == by_key.end() ? 0.0 : ar->second.tok_per_s();
    for (const std::string& strategy : strategies) {
      const auto it = by_key.find({strategy, group});
      if (it == by_key.end()) continue;
      BenchResult r = it->second;
      r.strategy = strategy;
      r.prompt_set = group;
      r.speedup = ar_speed > 0 ? r.tok_per_s() / ar_speed : 0.0;
      results.push_back(std::move(r));
    }
  }
  return results;
}

std::optional<size_t> first_difference(std::span<const int32_t> output,
                                       std::span<const int32_t> reference) {
  const size_t n = std::min(output.size(), reference.size());
  for (size_t i = 0; i < n; ++i)
    if (output[i] != reference[i]) return i;
  if (output.size() != reference.size()) return n;
  return std::nullopt;
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

std::string report_table(const BenchReport& report) {
  struct Column {
    const char* title;
    bool right;
  };
  const Column columns[] = {{"strategy", false},  {"prompt set", false}, {"tok/s", true},
                            {"speedup", true},    {"tau", true},         {"alpha", true},
                            {"draft ms", true},   {"verify ms", true},   {"n_gen", true},
                            {"target fwd", true}, {"draft fwd", true},   {"= ar", true}};
  constexpr size_t kColumns = sizeof columns / sizeof columns[0];
  std::vector<std::array<std::string, kColumns>> rows;
  for (const BenchResult& r : report.results) {
    rows.push_back({r.strategy, r.prompt_set, format("%.2f", r.tok_per_s()), speedup_text(r),
                    format("%.3f", r.tau()), alpha_text(r), format("%.3f", r.t_draft_ms()),
                    format("%.3f", r.t_verify_ms()), std::to_string(r.n_gen),
                    std::to_string(r.target_forwards), std::to_string(r.draft_forwards),
                    exactness_text(r, report.exactness_checked)});
  }
  std::array<size_t, kColumns> widths{};
  for (size_t c = 0; c < kColumns; ++c) {
    widths[c] = std::string_view(columns[c].title).size();
    for (const auto& row : rows) widths[c] = std::max(widths[c], row[c].size());
  }
  std::ostringstream out;
  const auto emit = [&](const auto& cells) {
    std::string line;
    for (size_t c = 0; c < kColumns; ++c) {
      if (c) line += "  ";
      line += pad(std::string(cells[c]), widths[c], columns[c].right);
    }
    out << std::string(trim(line)) << "\n";
  };
  std::array<std::string, kColumns> header;
  for (size_t c = 0; c < kColumns; ++c) header[c] = columns[c].title;
  emit(header);
  size_t total_width = 2 * (kColumns - 1);
  for (size_t w : widths) total_width += w;
  out << std::string(total_width, '-') << "\n";
  for (const auto& row : rows) emit(row);
  out << "(draft ms, verify ms: per target verification step; = ar: greedy output equals ar's)\n";

  // Per-position acceptance of the widest aggregate available per strategy.
  bool any_positions = false;
  for (const BenchResult& r : report.results) {
    const bool widest = r.prompt_set == kAllSets ||
                        std::none_of(report.results.begin(), report.results.end(),
                                     [](const BenchResult& o) { return o.prompt_set == kAllSets; });
    if (!widest || r.position_proposed.empty()) continue;
    if (!any_positions) out << "\nacceptance by draft position:\n";
    any_positions = true;
    out << "  " << r.strategy;
    if (r.prompt_set != kAllSets) out << " (" << r.prompt_set << ")";
    out << ": " << positions_text(r, " ") << "\n";
  }
  return out.str();
}

ojson report_json(const BenchReport& report) {
  const MachineInfo& m = report.machine;
  ojson machine = {
      {"cpu_model", m.cpu_model},
      {"cores", m.cores},
      {"threads", m.threads},
      {"threads_draft", m.threads_draft},
      {"memory_bytes", m.memory_bytes},
      {"memory_gib", rounded(m.memory_bytes / double(1 << 30), 2)},
  };
  const auto or_null = [](bool defined, double value) {
    return defined ? ojson(value) : ojson(nullptr);
  };
  ojson results = ojson::array();
  for (const BenchResult& r : report.results) {
    ojson positions = ojson::array();
    for (double rate : r.position_acceptance()) positions.push_back(rounded(rate, 4));
    results.push_back({
        {"strategy", r.strategy},
        {"prompt_set", r.prompt_set},
        {"tok_per_s", rounded(r.tok_per_s(), 3)},
        {"speedup", or_null(r.speedup > 0, rounded(r.speedup, 4))},
        {"tau", rounded(r.tau(), 4)},
        {"alpha", or_null(r.drafted > 0, rounded(r.alpha(), 4))},
        {"t_draft_ms", rounded(r.t_draft_ms(), 4)},
        {"t_verify_ms", rounded(r.t_verify_ms(), 4)},
        {"n_gen", r.n_gen},
        {"n_prompt", r.n_prompt},
        {"runs", r.runs},
        {"t_gen_ms", rounded(r.t_gen_ms, 3)},
        {"t_prompt_ms", rounded(r.t_prompt_ms, 3)},
        {"prompt_tok_per_s", rounded(r.prompt_tok_per_s(), 3)},
        {"drafted", r.drafted},
        {"accepted", r.accepted},
        {"verify_steps", r.verify_steps},
        {"target_forwards", r.target_forwards},
        {"draft_forwards", r.draft_forwards},
        {"t_draft_ms_total", rounded(r.t_draft_ms_total, 3)},
        {"t_verify_ms_total", rounded(r.t_verify_ms_total, 3)},
        {"per_position_acceptance", positions},
        {"per_position_proposed", r.position_proposed},
        {"per_position_accepted", r.position_accepted},
        {"mismatch", report.exactness_checked ? ojson(r.mismatches) : ojson(nullptr)},
        {"checked_runs", r.checked},
    });
  }
  ojson mismatches = ojson::array();
  for (const Mismatch& x : report.mismatches) {
    mismatches.push_back({{"strategy", x.strategy},
                          {"prompt_set", x.prompt_set},
                          {"prompt_index", x.prompt_index},
                          {"repeat", x.repeat},
                          {"position", x.position}});
  }
  return {
      {"machine", machine},       {"config", report.config},
      {"results", results},       {"exactness_checked", report.exactness_checked},
      {"mismatches", mismatches},
  };
}

std::string report_markdown(const BenchReport& report) {
  std::ostringstream out;
  out << "| strategy | prompt set | tok/s | speedup | τ | α | draft ms/step | verify ms/step | "
         "n_gen "
         "| target fwd | draft fwd | acceptance by position | = ar |\n";
  out << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n";
  for (const BenchResult& r : report.results) {
    out << "| " << markdown_escape(r.strategy) << " | " << markdown_escape(r.prompt_set) << " | "
        << format("%.2f", r.tok_per_s()) << " | " << speedup_text(r) << " | "
        << format("%.2f", r.tau()) << " | " << alpha_text(r) << " | "
        << format("%.3f", r.t_draft_ms()) << " | " << format("%.3f", r.t_verify_ms()) << " | "
        << r.n_gen << " | " << r.target_forwards << " | " << r.draft_forwards << " | "
        << positions_text(r, " / ") << " | " << exactness_text(r, report.exactness_checked)
        << " |\n";
  }
  return out.str();
}

namespace {

// Tick step giving at most ~8 ticks up to `top`: 1, 2 or 5 times a power of ten.
double nice_step(double top) {
  const double raw = top / 8.0;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * magnitude) return m * magnitude;
  return 10.0 * magnitude;
}

std::string num(double v) {
  return format("%.1f", v);
}

}  // namespace

namespace {

const char* bar_color(size_t i) {
  static const char* const kPalette[] = {"#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                         "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"};
  return kPalette[i % (sizeof kPalette / sizeof *kPalette)];
}

// Geometry of the speedup chart.
struct SvgLayout {
  double bar_w = 22, bar_gap = 4, group_gap = 30;
  double left = 72, right = 24, top = 78, bottom = 64, plot_h = 280;
  double group_w = 0, plot_w = 0, width = 0, height = 0, group_pad = 0;
  double step = 1, y_top = 1;

  SvgLayout(size_t n_strategies, size_t n_groups, double max_speedup) {
    const size_t n_bars = std::max<size_t>(n_strategies, 1);
    group_w = n_bars * bar_w + (n_bars - 1) * bar_gap;
    plot_w = std::max(360.0, n_groups * group_w + (n_groups + 1) * group_gap);
    width = left + plot_w + right;
    height = top + plot_h + bottom;
    // Center the groups when the minimum width leaves room.
    group_pad = (plot_w - n_groups * group_w) / (n_groups + 1);
    step = nice_step(max_speedup * 1.1);
    y_top = std::ceil(max_speedup * 1.1 / step) * step;
  }
  double y_of(double v) const { return top + plot_h - v / y_top * plot_h; }
};

// Bars with their values, grouped by prompt set.
void svg_bars(std::ostringstream& out, const BenchReport& report, const SvgLayout& l,
              const std::vector<std::string>& strategies, const std::vector<std::string>& groups) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const double group_x = l.left + l.group_pad + g * (l.group_w + l.group_pad);
    for (size_t s = 0; s < strategies.size(); ++s) {
      const auto it =
          std::find_if(report.results.begin(), report.results.end(), [&](const BenchResult& r) {
            return r.strategy == strategies[s] && r.prompt_set == groups[g];
          });
      if (it == report.results.end()) continue;
      const double x = group_x + s * (l.bar_w + l.bar_gap);
      const double y = l.y_of(it->speedup);
      out << "<rect class=\"bar\" data-strategy=\"" << xml_escape(strategies[s])
          << "\" data-prompt-set=\"" << xml_escape(groups[g]) << "\" x=\"" << num(x) << "\" y=\""
          << num(y) << "\" width=\"" << num(l.bar_w) << "\" height=\"" << num(l.top + l.plot_h - y)
          << "\" fill=\"" << bar_color(s) << "\"/>\n";
      out << "<text x=\"" << num(x + l.bar_w / 2) << "\" y=\"" << num(y - 4)
          << "\" text-anchor=\"middle\" font-size=\"9\">"
          << (it->speedup > 0 ? format("%.2f", it->speedup) : "n/a") << "</text>\n";
    }
    out << "<text x=\"" << num(group_x + l.group_w / 2) << "\" y=\"" << num(l.top + l.plot_h + 18)
        << "\" text-anchor=\"middle\">" << xml_escape(groups[g]) << "</text>\n";
  }
}

// The ar baseline, then the axes (on top of the bars) and their labels.
void svg_axes(std::ostringstream& out, const SvgLayout& l) {
  const double left = l.left, top = l.top, plot_w = l.plot_w, plot_h = l.plot_h;
  out << "<line class=\"baseline\" x1=\"" << num(left) << "\" y1=\"" << num(l.y_of(1.0))
      << "\" x2=\"" << num(left + plot_w) << "\" y2=\"" << num(l.y_of(1.0))
      << "\" stroke=\"#333333\" stroke-dasharray=\"4 3\"/>\n";
  out << "<line class=\"axis\" x1=\"" << num(left) << "\" y1=\"" << num(top) << "\" x2=\""
      << num(left) << "\" y2=\"" << num(top + plot_h) << "\" stroke=\"#000000\"/>\n";
  out << "<line class=\"axis\" x1=\"" << num(left) << "\" y1=\"" << num(top + plot_h) << "\" x2=\""
      << num(left + plot_w) << "\" y2=\"" << num(top + plot_h) << "\" stroke=\"#000000\"/>\n";
  out << "<text x=\"" << num(left + plot_w / 2) << "\" y=\"" << num(l.height - 14)
      << "\" text-anchor=\"middle\">prompt set</text>\n";
  const double label_x = 20, label_y = top + plot_h / 2;
  out << "<text x=\"" << num(label_x) << "\" y=\"" << num(label_y)
      << "\" text-anchor=\"middle\" transform=\"rotate(-90 " << num(label_x) << " " << num(label_y)
      << ")\">" << xml_escape("speedup over ar (×, tokens/s ratio)") << "</text>\n";
}

}  // namespace

std::string report_svg(const BenchReport& report) {
  std::vector<std::string> strategies, groups;
  for (const BenchResult& r : report.results) {
    if (std::find(strategies.begin(), strategies.end(), r.strategy) == strategies.end())
      strategies.push_back(r.strategy);
    if (std::find(groups.begin(), groups.end(), r.prompt_set) == groups.end())
      groups.push_back(r.prompt_set);
  }
  double max_speedup = 1.0;
  for (const BenchResult& r : report.results) max_speedup = std::max(max_speedup, r.speedup);
  const SvgLayout l(strategies.size(), groups.size(), max_speedup);

  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(l.width) << "\" height=\""
      << num(l.height) << "\" viewBox=\"0 0 " << num(l.width) << " " << num(l.height)
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out << "<rect x=\"0\" y=\"0\" width=\"" << num(l.width) << "\" height=\"" << num(l.height)
      << "\" fill=\"#ffffff\"/>\n";
  out << "<text x=\"" << num(l.width / 2) << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\""
      << " font-weight=\"bold\">" << xml_escape("Speedup over ar per prompt set") << "</text>\n";

  // Legend: one swatch per strategy in a row under the title.
  double legend_x = l.left;
  for (size_t s = 0; s < strategies.size(); ++s) {
    out << "<rect class=\"legend-swatch\" x=\"" << num(legend_x) << "\" y=\"40\" width=\"12\""
        << " height=\"12\" fill=\"" << bar_color(s) << "\"/>\n";
    out << "<text x=\"" << num(legend_x + 16) << "\" y=\"50\">" << xml_escape(strategies[s])
        << "</text>\n";
    legend_x += 28 + 7.5 * strategies[s].size();
  }

  // Grid and y-axis ticks.
  for (double v = 0; v <= l.y_top + l.step / 2; v += l.step) {
    const double y = l.y_of(v);
    out << "<line class=\"grid\" x1=\"" << num(l.left) << "\" y1=\"" << num(y) << "\" x2=\""
        << num(l.left + l.plot_w) << "\" y2=\"" << num(y) << "\" stroke=\"#e0e0e0\"/>\n";
    out << "<text x=\"" << num(l.left - 6) << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\">"
        << format(l.step < 1 ? "%.2f" : "%.0f", v) << "</text>\n";
  }

  svg_bars(out, report, l, strategies, groups);
  svg_axes(out, l);
  out << "</svg>\n";
  return out.str();
}

}  // namespace parspec
