#include "reports/svg.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "reports/format.h"

namespace ctitan::svg {
namespace {

constexpr int kWidth = 1000;
constexpr int kRowHeight = 22;
constexpr double kCharWidth = 6.6;  // px per character of the 12 px sans-serif labels, roughly
constexpr const char* kAxisColor = "#444";
constexpr const char* kGridColor = "#e3e3e3";

std::string num(double v) { return fmt::fixed(v, 1); }

std::string tick_text(double v, double step) {
  if (std::fabs(v) >= 1e4) return fmt::grouped(v);
  int decimals = 0;
  for (double s = step; decimals < 6 && std::fabs(s - std::round(s)) > 1e-9; s *= 10) ++decimals;
  return fmt::fixed(v, decimals);
}

std::string shorten(const std::string& s, size_t max_chars) {
  if (s.size() <= max_chars) return s;
  return s.substr(0, max_chars - 1) + "\u2026";
}

std::string open_svg(int height, const std::string& title) {
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << height << "\" viewBox=\"0 0 "
    << kWidth << " " << height << "\" role=\"img\" aria-label=\"" << fmt::html_escape(title)
    << "\" font-family=\"sans-serif\" font-size=\"12\">"
    << "<rect x=\"0\" y=\"0\" width=\"" << kWidth << "\" height=\"" << height << "\" fill=\"#fff\"/>"
    << "<text x=\"8\" y=\"18\" font-size=\"14\" font-weight=\"bold\" fill=\"#222\">" << fmt::html_escape(title)
    << "</text>";
  return o.str();
}

}  // namespace

std::string color(size_t i) {
  // Okabe–Ito, then darker variants.
  static const char* kPalette[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9",
                                   "#F0E442", "#000000", "#005A8C", "#B07A00", "#006E50", "#9E4500"};
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + (lo == 0 ? 1 : std::fabs(lo) * 0.1);
  const double raw = (hi - lo) / std::max(target, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::floor(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push_back(t);
  if (ticks.back() < hi) ticks.push_back(ticks.back() + step);
  return ticks;
}

std::string bar_chart(const std::string& title, const std::string& axis_label, const std::vector<Bar>& bars) {
  if (bars.empty()) {
    std::ostringstream o;
    o << open_svg(44, title) << "<text x=\"8\" y=\"36\" fill=\"#666\">no data</text></svg>";
    return o.str();
  }
  size_t longest = 0;
  double max_v = 0;
  for (const Bar& b : bars) {
    longest = std::max(longest, b.label.size());
    max_v = std::max({max_v, b.value, b.hi.value_or(b.value)});
  }
  const size_t label_chars = std::min<size_t>(longest, 60);
  const double left = 16 + kCharWidth * static_cast<double>(label_chars);
  const double right = kWidth - 90;
  const double top = 30;
  const int height = static_cast<int>(top) + kRowHeight * static_cast<int>(bars.size()) + 44;
  const std::vector<double> ticks = nice_ticks(0, max_v > 0 ? max_v : 1);
  const double x_max = ticks.back();
  const auto x = [&](double v) { return left + (right - left) * v / x_max; };
  const double bottom = top + kRowHeight * static_cast<double>(bars.size());

  std::ostringstream o;
  o << open_svg(height, title);
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  for (double t : ticks) {
    o << "<line x1=\"" << num(x(t)) << "\" y1=\"" << num(top) << "\" x2=\"" << num(x(t)) << "\" y2=\"" << num(bottom)
      << "\" stroke=\"" << kGridColor << "\"/>"
      << "<text x=\"" << num(x(t)) << "\" y=\"" << num(bottom + 14) << "\" text-anchor=\"middle\" fill=\"#555\">"
      << tick_text(t, step) << "</text>";
  }
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const double y = top + kRowHeight * static_cast<double>(i);
    const std::string fill = b.highlight ? color(1) : color(0);
    o << "<g><title>" << fmt::html_escape(b.label + ": " + b.text) << "</title>"
      << "<text x=\"" << num(left - 6) << "\" y=\"" << num(y + 15) << "\" text-anchor=\"end\" fill=\"#222\">"
      << fmt::html_escape(shorten(b.label, label_chars)) << "</text>"
      << "<rect x=\"" << num(left) << "\" y=\"" << num(y + 4) << "\" width=\"" << num(std::max(0.0, x(b.value) - left))
      << "\" height=\"" << kRowHeight - 8 << "\" fill=\"" << fill << "\"/>";
    if (b.lo && b.hi) {
      const double cy = y + kRowHeight / 2.0;
      o << "<line x1=\"" << num(x(*b.lo)) << "\" y1=\"" << num(cy) << "\" x2=\"" << num(x(*b.hi)) << "\" y2=\""
        << num(cy) << "\" stroke=\"#111\" stroke-width=\"1.5\"/>";
      for (double e : {*b.lo, *b.hi})
        o << "<line x1=\"" << num(x(e)) << "\" y1=\"" << num(cy - 5) << "\" x2=\"" << num(x(e)) << "\" y2=\""
          << num(cy + 5) << "\" stroke=\"#111\" stroke-width=\"1.5\"/>";
    }
    o << "<text x=\"" << num(std::max(x(b.value), x(b.hi.value_or(b.value))) + 6) << "\" y=\"" << num(y + 15)
      << "\" fill=\"#222\">" << fmt::html_escape(b.text) << "</text></g>";
  }
  o << "<line x1=\"" << num(left) << "\" y1=\"" << num(top) << "\" x2=\"" << num(left) << "\" y2=\"" << num(bottom)
    << "\" stroke=\"" << kAxisColor << "\"/>"
    << "<text x=\"" << num((left + right) / 2) << "\" y=\"" << num(bottom + 32)
    << "\" text-anchor=\"middle\" fill=\"#333\">" << fmt::html_escape(axis_label) << "</text></svg>";
  return o.str();
}

std::string line_chart(const std::string& title, const std::vector<Series>& series, const LineChartOptions& opts) {
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  std::set<double> xs;
  for (const Series& s : series)
    for (const auto& [px, py] : s.points) {
      x_lo = std::min(x_lo, px), x_hi = std::max(x_hi, px);
      y_lo = std::min(y_lo, py), y_hi = std::max(y_hi, py);
      xs.insert(px);
    }
  if (xs.empty()) {
    std::ostringstream o;
    o << open_svg(44, title) << "<text x=\"8\" y=\"36\" fill=\"#666\">no data</text></svg>";
    return o.str();
  }
  if (opts.y_from_zero) y_lo = std::min(0.0, y_lo);
  const std::vector<double> y_ticks = nice_ticks(y_lo, y_hi);
  const std::vector<double> x_ticks =
      opts.integer_x ? std::vector<double>(xs.begin(), xs.end()) : nice_ticks(x_lo, x_hi);
  const double xa = x_ticks.front(), xb = std::max(x_ticks.back(), xa + 1e-9);
  const double ya = y_ticks.front(), yb = y_ticks.back();
  const double left = 80, right = kWidth - 24, top = 32, plot_h = 280, bottom = top + plot_h;
  const int legend_cols = 2;
  const int legend_rows = static_cast<int>((series.size() + legend_cols - 1) / legend_cols);
  const int height = static_cast<int>(bottom) + 56 + 18 * legend_rows;
  const auto px = [&](double v) { return left + (right - left) * (v - xa) / (xb - xa); };
  const auto py = [&](double v) { return bottom - plot_h * (v - ya) / (yb - ya); };

  std::ostringstream o;
  o << open_svg(height, title);
  const double y_step = y_ticks.size() > 1 ? y_ticks[1] - y_ticks[0] : 1;
  for (double t : y_ticks)
    o << "<line x1=\"" << num(left) << "\" y1=\"" << num(py(t)) << "\" x2=\"" << num(right) << "\" y2=\"" << num(py(t))
      << "\" stroke=\"" << kGridColor << "\"/><text x=\"" << num(left - 6) << "\" y=\"" << num(py(t) + 4)
      << "\" text-anchor=\"end\" fill=\"#555\">" << tick_text(t, y_step) << "</text>";
  const double x_step = x_ticks.size() > 1 ? x_ticks[1] - x_ticks[0] : 1;
  for (double t : x_ticks)
    o << "<line x1=\"" << num(px(t)) << "\" y1=\"" << num(bottom) << "\" x2=\"" << num(px(t)) << "\" y2=\""
      << num(bottom + 4) << "\" stroke=\"" << kAxisColor << "\"/><text x=\"" << num(px(t)) << "\" y=\""
      << num(bottom + 17) << "\" text-anchor=\"middle\" fill=\"#555\">"
      << (opts.integer_x ? fmt::fixed(t, 0) : tick_text(t, x_step)) << "</text>";
  o << "<polyline points=\"" << num(left) << "," << num(top) << " " << num(left) << "," << num(bottom) << " "
    << num(right) << "," << num(bottom) << "\" fill=\"none\" stroke=\"" << kAxisColor << "\"/>"
    << "<text x=\"" << num((left + right) / 2) << "\" y=\"" << num(bottom + 34)
    << "\" text-anchor=\"middle\" fill=\"#333\">" << fmt::html_escape(opts.x_label) << "</text>"
    << "<text transform=\"translate(16," << num((top + bottom) / 2) << ") rotate(-90)\" text-anchor=\"middle\" "
    << "fill=\"#333\">" << fmt::html_escape(opts.y_label) << "</text>";
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    const std::string c = color(i);
    o << "<g><title>" << fmt::html_escape(s.name) << "</title><polyline fill=\"none\" stroke=\"" << c
      << "\" stroke-width=\"2\" points=\"";
    for (const auto& [vx, vy] : s.points) o << num(px(vx)) << "," << num(py(vy)) << " ";
    o << "\"/>";
    if (s.points.size() <= 40)
      for (const auto& [vx, vy] : s.points)
        o << "<circle cx=\"" << num(px(vx)) << "\" cy=\"" << num(py(vy)) << "\" r=\"3\" fill=\"" << c << "\"><title>"
          << fmt::html_escape(s.name) << ": " << tick_text(vx, x_step) << ", " << fmt::fixed(vy, 4)
          << "</title></circle>";
    o << "</g>";
    const double lx = 16 + (kWidth / legend_cols) * static_cast<double>(i % legend_cols);
    const double ly = bottom + 60 + 18 * static_cast<double>(i / legend_cols);
    o << "<rect x=\"" << num(lx) << "\" y=\"" << num(ly - 9) << "\" width=\"14\" height=\"4\" fill=\"" << c
      << "\"/><text x=\"" << num(lx + 20) << "\" y=\"" << num(ly - 3) << "\" fill=\"#222\">"
      << fmt::html_escape(shorten(s.name, 72)) << "</text>";
  }
  o << "</svg>";
  return o.str();
}

}  // namespace ctitan::svg
