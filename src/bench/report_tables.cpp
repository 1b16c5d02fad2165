// The terminal table and the Markdown table of a benchmark report.
#include <algorithm>
#include <array>
#include <sstream>

#include "bench/report.h"
#include "bench/text_format.h"

namespace parspec {

namespace {

std::string pad(std::string text, size_t width, bool right_align) {
  if (text.size() >= width) return text;
  const std::string fill(width - text.size(), ' ');
  return right_align ? fill + text : text + fill;
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
  return r.total.drafted > 0 ? format("%.3f", r.alpha()) : "-";
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

// A mixture-of-experts target: the distinct experts its forwards touched per
// layer, per strategy (what a verification step costs beyond a dense one's).
std::string experts_text(const BenchReport& report) {
  std::string text;
  for (const BenchResult& r : report.results) {
    if (r.total.expert_layer_passes == 0) continue;
    if (text.empty())
      text = "\ndistinct experts per layer a target forward touched (of a step's rows):\n";
    text += "  " + r.strategy + (r.prompt_set != kAllSets ? " (" + r.prompt_set + ")" : "") + ": " +
            format("%.2f", r.total.experts_per_forward()) + "\n";
  }
  return text;
}

}  // namespace

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
                    format("%.3f", r.t_verify_ms()), std::to_string(r.total.n_gen),
                    std::to_string(r.total.target_forwards), std::to_string(r.total.draft_forwards),
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
    if (!widest || r.total.per_position.proposed.empty()) continue;
    if (!any_positions) out << "\nacceptance by draft position:\n";
    any_positions = true;
    out << "  " << r.strategy;
    if (r.prompt_set != kAllSets) out << " (" << r.prompt_set << ")";
    out << ": " << positions_text(r, " ") << "\n";
  }
  out << experts_text(report);
  return out.str();
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
        << r.total.n_gen << " | " << r.total.target_forwards << " | " << r.total.draft_forwards
        << " | " << positions_text(r, " / ") << " | " << exactness_text(r, report.exactness_checked)
        << " |\n";
  }
  out << experts_text(report);
  return out.str();
}

}  // namespace parspec
