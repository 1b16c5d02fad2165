// The speedup bar chart of a benchmark report, as standalone SVG.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "bench/report.h"
#include "bench/text_format.h"

namespace parspec {

namespace {

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
