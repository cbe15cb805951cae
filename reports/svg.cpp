#include "reports/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "reports/format.h"

namespace ctitan::svg {
namespace {

constexpr int kRowHeight = 22;
constexpr int kLineHeight = 14;     // px between the lines of a wrapped label
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

std::string open_svg(int width, int height, const std::string& title) {
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height << "\" viewBox=\"0 0 "
    << width << " " << height << "\" role=\"img\" aria-label=\"" << fmt::html_escape(title)
    << "\" font-family=\"sans-serif\" font-size=\"12\">"
    << "<rect x=\"0\" y=\"0\" width=\"" << width << "\" height=\"" << height << "\" fill=\"#fff\"/>";
  const std::vector<std::string> lines = wrap(title, static_cast<size_t>((width - 16) / 7.8));
  for (size_t i = 0; i < lines.size() && i < 2; ++i)
    o << "<text x=\"8\" y=\"" << 18 + 17 * i << "\" font-size=\"14\" font-weight=\"bold\" fill=\"#222\">"
      << fmt::html_escape(lines[i]) << "</text>";
  return o.str();
}

// Extra height a title of two lines takes.
int title_extra(int width, const std::string& title) {
  return wrap(title, static_cast<size_t>((width - 16) / 7.8)).size() > 1 ? 17 : 0;
}

std::string no_data(int width, const std::string& title) {
  std::ostringstream o;
  o << open_svg(width, 44 + title_extra(width, title), title) << "<text x=\"8\" y=\""
    << 36 + title_extra(width, title) << "\" fill=\"#666\">no data</text></svg>";
  return o.str();
}

// A label's lines as one <text> whose continuation lines are <tspan>s: its
// textContent is the whole label (lines joined by their spaces).
std::string text_lines(const std::vector<std::string>& lines, double x, double y, const std::string& anchor,
                       const std::string& cls) {
  std::ostringstream o;
  o << "<text class=\"" << cls << "\" x=\"" << num(x) << "\" y=\"" << num(y) << "\" text-anchor=\"" << anchor
    << "\" fill=\"#222\">";
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i == 0)
      o << fmt::html_escape(lines[i]);
    else
      o << "<tspan x=\"" << num(x) << "\" dy=\"" << kLineHeight << "\"> " << fmt::html_escape(lines[i]) << "</tspan>";
  }
  o << "</text>";
  return o.str();
}

}  // namespace

std::vector<std::string> wrap(const std::string& label, size_t max_chars) {
  std::vector<std::string> lines;
  std::istringstream in(label);
  std::string line;
  for (std::string word; in >> word;) {
    if (!line.empty() && line.size() + 1 + word.size() > max_chars) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty() || lines.empty()) lines.push_back(line);
  return lines;
}

std::string color(size_t i) {
  // Okabe–Ito, then darker variants.
  static const char* kPalette[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9",
                                   "#F0E442", "#000000", "#005A8C", "#B07A00", "#006E50", "#9E4500"};
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

std::string dash(size_t i) {
  static const char* kDash[] = {"", "6 3", "2 3", "8 3 2 3", "1 2", "10 4"};
  return kDash[i % (sizeof kDash / sizeof kDash[0])];
}

std::string marker(size_t i, double x, double y, double r, const std::string& fill, const std::string& stroke) {
  std::ostringstream o;
  const std::string paint = "fill=\"" + fill + "\" stroke=\"" + stroke + "\" stroke-width=\"1.5\"";
  switch (i % 4) {
    case 0:
      o << "<circle cx=\"" << num(x) << "\" cy=\"" << num(y) << "\" r=\"" << num(r) << "\" " << paint << "/>";
      break;
    case 1:
      o << "<rect x=\"" << num(x - r) << "\" y=\"" << num(y - r) << "\" width=\"" << num(2 * r) << "\" height=\""
        << num(2 * r) << "\" " << paint << "/>";
      break;
    case 2:
      o << "<polygon points=\"" << num(x) << "," << num(y - r * 1.2) << " " << num(x + r * 1.1) << ","
        << num(y + r * 0.9) << " " << num(x - r * 1.1) << "," << num(y + r * 0.9) << "\" " << paint << "/>";
      break;
    default:
      o << "<polygon points=\"" << num(x) << "," << num(y - r * 1.3) << " " << num(x + r * 1.3) << "," << num(y) << " "
        << num(x) << "," << num(y + r * 1.3) << " " << num(x - r * 1.3) << "," << num(y) << "\" " << paint << "/>";
  }
  return o.str();
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

std::string bar_chart(const std::string& title, const std::string& axis_label, const std::vector<Bar>& bars,
                      int width) {
  if (bars.empty()) return no_data(width, title);
  size_t longest = 0;
  double max_v = 0;
  for (const Bar& b : bars) {
    longest = std::max(longest, b.label.size());
    max_v = std::max({max_v, b.value, b.hi.value_or(b.value)});
  }
  // Labels take at most 40 % of the width; a longer one wraps.
  const size_t label_chars = std::min<size_t>(longest, static_cast<size_t>(0.4 * width / kCharWidth));
  const double left = 16 + kCharWidth * static_cast<double>(label_chars);
  const double right = width - 90;
  const double top = 30 + title_extra(width, title);
  std::vector<std::vector<std::string>> labels;
  std::vector<double> row_y;  // each row's top
  double y = top;
  for (const Bar& b : bars) {
    labels.push_back(wrap(b.label, label_chars));
    row_y.push_back(y);
    y += kRowHeight + kLineHeight * static_cast<double>(labels.back().size() - 1);
  }
  const double bottom = y;
  const int height = static_cast<int>(bottom) + 44;
  const std::vector<double> ticks = nice_ticks(0, max_v > 0 ? max_v : 1);
  const double x_max = ticks.back();
  const auto x = [&](double v) { return left + (right - left) * v / x_max; };

  std::ostringstream o;
  o << open_svg(width, height, title);
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  for (double t : ticks) {
    o << "<line x1=\"" << num(x(t)) << "\" y1=\"" << num(top) << "\" x2=\"" << num(x(t)) << "\" y2=\"" << num(bottom)
      << "\" stroke=\"" << kGridColor << "\"/>"
      << "<text x=\"" << num(x(t)) << "\" y=\"" << num(bottom + 14) << "\" text-anchor=\"middle\" fill=\"#555\">"
      << tick_text(t, step) << "</text>";
  }
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const double ry = row_y[i];
    const std::string fill = b.highlight ? color(1) : color(0);
    o << "<g><title>" << fmt::html_escape(b.label + ": " + b.text) << "</title>"
      << text_lines(labels[i], left - 6, ry + 15, "end", "label")
      << "<rect x=\"" << num(left) << "\" y=\"" << num(ry + 4) << "\" width=\"" << num(std::max(0.0, x(b.value) - left))
      << "\" height=\"" << kRowHeight - 8 << "\" fill=\"" << fill << "\"/>";
    if (b.lo && b.hi) {
      const double cy = ry + kRowHeight / 2.0;
      o << "<line x1=\"" << num(x(*b.lo)) << "\" y1=\"" << num(cy) << "\" x2=\"" << num(x(*b.hi)) << "\" y2=\""
        << num(cy) << "\" stroke=\"#111\" stroke-width=\"1.5\"/>";
      for (double e : {*b.lo, *b.hi})
        o << "<line x1=\"" << num(x(e)) << "\" y1=\"" << num(cy - 5) << "\" x2=\"" << num(x(e)) << "\" y2=\""
          << num(cy + 5) << "\" stroke=\"#111\" stroke-width=\"1.5\"/>";
    }
    o << "<text x=\"" << num(std::max(x(b.value), x(b.hi.value_or(b.value))) + 6) << "\" y=\"" << num(ry + 15)
      << "\" fill=\"#222\">" << fmt::html_escape(b.text) << "</text></g>";
  }
  o << "<line x1=\"" << num(left) << "\" y1=\"" << num(top) << "\" x2=\"" << num(left) << "\" y2=\"" << num(bottom)
    << "\" stroke=\"" << kAxisColor << "\"/>"
    << "<text x=\"" << num((left + right) / 2) << "\" y=\"" << num(bottom + 32)
    << "\" text-anchor=\"middle\" fill=\"#333\">" << fmt::html_escape(axis_label) << "</text></svg>";
  return o.str();
}

std::string grouped_bar_chart(const std::string& title, const std::string& axis_label,
                              const std::vector<std::string>& series, const std::vector<BarGroup>& groups, int width) {
  if (groups.empty() || series.empty()) return no_data(width, title);
  size_t longest = 0;
  double max_v = 0;
  for (const BarGroup& g : groups) {
    longest = std::max(longest, g.label.size());
    for (const auto& v : g.values) max_v = std::max(max_v, v.value_or(0));
  }
  const size_t label_chars = std::min<size_t>(longest, static_cast<size_t>(0.3 * width / kCharWidth));
  const double left = 16 + kCharWidth * static_cast<double>(label_chars), right = width - 110;
  const double bar_h = 12, top = 52 + title_extra(width, title);
  std::vector<std::vector<std::string>> labels;
  std::vector<double> group_y;
  double y = top;
  for (const BarGroup& g : groups) {
    labels.push_back(wrap(g.label, label_chars));
    group_y.push_back(y);
    y += std::max(bar_h * static_cast<double>(series.size()) + 10,
                  kLineHeight * static_cast<double>(labels.back().size()) + 8);
  }
  const double bottom = y;
  const std::vector<double> ticks = nice_ticks(0, max_v > 0 ? max_v : 1);
  const auto x = [&](double v) { return left + (right - left) * v / ticks.back(); };
  std::ostringstream o;
  o << open_svg(width, static_cast<int>(bottom) + 40, title);
  for (size_t j = 0; j < series.size(); ++j) {  // the legend
    const double lx = left + 150.0 * static_cast<double>(j);
    o << "<rect x=\"" << num(lx) << "\" y=\"" << num(top - 22) << "\" width=\"12\" height=\"12\" fill=\"" << color(j)
      << "\"/><text x=\"" << num(lx + 16) << "\" y=\"" << num(top - 12) << "\" fill=\"#222\">"
      << fmt::html_escape(series[j]) << "</text>";
  }
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  for (double t : ticks)
    o << "<line x1=\"" << num(x(t)) << "\" y1=\"" << num(top) << "\" x2=\"" << num(x(t)) << "\" y2=\"" << num(bottom)
      << "\" stroke=\"" << kGridColor << "\"/><text x=\"" << num(x(t)) << "\" y=\"" << num(bottom + 14)
      << "\" text-anchor=\"middle\" fill=\"#555\">" << tick_text(t, step) << "</text>";
  for (size_t i = 0; i < groups.size(); ++i) {
    const BarGroup& g = groups[i];
    o << text_lines(labels[i], left - 6, group_y[i] + 13, "end", "label");
    for (size_t j = 0; j < series.size(); ++j) {
      const double by = group_y[i] + bar_h * static_cast<double>(j);
      const std::string text = j < g.texts.size() ? g.texts[j] : "";
      o << "<g><title>" << fmt::html_escape(g.label + ", " + series[j] + ": " + (text.empty() ? "-" : text))
        << "</title>";
      if (j < g.values.size() && g.values[j])
        o << "<rect x=\"" << num(left) << "\" y=\"" << num(by + 1) << "\" width=\""
          << num(std::max(0.0, x(*g.values[j]) - left)) << "\" height=\"" << bar_h - 2 << "\" fill=\"" << color(j)
          << "\"/>";
      const double tx = (j < g.values.size() && g.values[j] ? x(*g.values[j]) : left) + 4;
      o << "<text x=\"" << num(tx) << "\" y=\"" << num(by + 10) << "\" font-size=\"10\" fill=\"#333\">"
        << fmt::html_escape(text.empty() ? "\u2014" : text) << "</text></g>";
    }
  }
  o << "<line x1=\"" << num(left) << "\" y1=\"" << num(top) << "\" x2=\"" << num(left) << "\" y2=\"" << num(bottom)
    << "\" stroke=\"" << kAxisColor << "\"/><text x=\"" << num((left + right) / 2) << "\" y=\"" << num(bottom + 32)
    << "\" text-anchor=\"middle\" fill=\"#333\">" << fmt::html_escape(axis_label) << "</text></svg>";
  return o.str();
}

std::string line_chart(const std::string& title, const std::vector<Series>& series, const LineChartOptions& opts) {
  const int width = opts.width;
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  std::set<double> xs;
  for (const Series& s : series) {
    for (const auto& [px, py] : s.points) {
      x_lo = std::min(x_lo, px), x_hi = std::max(x_hi, px);
      y_lo = std::min(y_lo, py), y_hi = std::max(y_hi, py);
      xs.insert(px);
    }
    for (const auto& [bx, blo, bhi] : s.band) y_lo = std::min(y_lo, blo), y_hi = std::max(y_hi, bhi);
  }
  if (xs.empty()) return no_data(width, title);
  if (opts.y_from_zero) y_lo = std::min(0.0, y_lo);
  const std::vector<double> y_ticks = nice_ticks(y_lo, y_hi);
  const std::vector<double> x_ticks =
      opts.integer_x ? std::vector<double>(xs.begin(), xs.end()) : nice_ticks(x_lo, x_hi);
  const double xa = x_ticks.front(), xb = std::max(x_ticks.back(), xa + 1e-9);
  const double ya = y_ticks.front(), yb = y_ticks.back();
  const double plot_h = opts.plot_height;
  const double left = 80, right = width - 24, top = 32 + title_extra(width, title), bottom = top + plot_h;
  // The legend: one entry per series that is not faint, as many columns as fit, labels wrapped.
  std::vector<size_t> legend;
  for (size_t i = 0; i < series.size(); ++i)
    if (!series[i].faint) legend.push_back(i);
  const int legend_cols = std::max(1, width / 330);
  const size_t legend_chars = static_cast<size_t>((width / legend_cols - 40) / kCharWidth);
  std::vector<std::vector<std::string>> legend_lines;
  for (size_t i : legend) legend_lines.push_back(wrap(series[i].name, legend_chars));
  std::vector<double> legend_row_y;  // each legend row's top, rows as tall as their longest label
  double ly = bottom + 52;
  for (size_t r = 0; r * legend_cols < legend.size(); ++r) {
    legend_row_y.push_back(ly);
    size_t tallest = 1;
    for (size_t c = 0; c < static_cast<size_t>(legend_cols) && r * legend_cols + c < legend.size(); ++c)
      tallest = std::max(tallest, legend_lines[r * legend_cols + c].size());
    ly += 18 + kLineHeight * static_cast<double>(tallest - 1);
  }
  const int height = static_cast<int>(ly) + 8;
  const auto px = [&](double v) { return left + (right - left) * (v - xa) / (xb - xa); };
  const auto py = [&](double v) { return bottom - plot_h * (v - ya) / (yb - ya); };

  std::ostringstream o;
  o << open_svg(width, height, title);
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
  // Faint context first (behind), then the series in legend order.
  std::vector<size_t> order;
  for (size_t i = 0; i < series.size(); ++i)
    if (series[i].faint) order.push_back(i);
  order.insert(order.end(), legend.begin(), legend.end());
  for (size_t i : order) {
    const Series& s = series[i];
    const size_t k = static_cast<size_t>(std::find(legend.begin(), legend.end(), i) - legend.begin());
    const std::string c = s.faint ? "#c8c8c8" : s.dashed ? "#222" : color(k);
    const std::string d = s.dashed ? "6 4" : s.faint ? "" : dash(k);
    if (!s.band.empty()) {  // the range: up along hi, back along lo
      o << "<polygon fill=\"" << c << "\" fill-opacity=\"0.18\" stroke=\"none\" points=\"";
      for (const auto& [bx, blo, bhi] : s.band) o << num(px(bx)) << "," << num(py(bhi)) << " ";
      for (auto it = s.band.rbegin(); it != s.band.rend(); ++it)
        o << num(px(std::get<0>(*it))) << "," << num(py(std::get<1>(*it))) << " ";
      o << "\"/>";
    }
    o << "<g><title>" << fmt::html_escape(s.name) << "</title><polyline fill=\"none\" stroke=\"" << c
      << "\" stroke-width=\"" << (s.faint ? 1 : 2) << "\"" << (d.empty() ? "" : " stroke-dasharray=\"" + d + "\"")
      << " points=\"";
    for (const auto& [vx, vy] : s.points) o << num(px(vx)) << "," << num(py(vy)) << " ";
    o << "\"/>";
    if (!s.faint && !s.dashed && s.points.size() <= 40)
      for (const auto& [vx, vy] : s.points)
        o << "<g><title>" << fmt::html_escape(s.name) << ": " << tick_text(vx, x_step) << ", " << fmt::fixed(vy, 4)
          << "</title>" << marker(k, px(vx), py(vy), 3.5, c, c) << "</g>";
    o << "</g>";
  }
  for (size_t j = 0; j < legend.size(); ++j) {
    const Series& s = series[legend[j]];
    const double lx = 16 + (static_cast<double>(width) / legend_cols) * static_cast<double>(j % legend_cols);
    const double row_top = legend_row_y[j / legend_cols];
    const std::string c = s.dashed ? "#222" : color(j);
    const std::string d = s.dashed ? "6 4" : dash(j);
    o << "<line x1=\"" << num(lx) << "\" y1=\"" << num(row_top - 7) << "\" x2=\"" << num(lx + 24) << "\" y2=\""
      << num(row_top - 7) << "\" stroke=\"" << c << "\" stroke-width=\"2\""
      << (d.empty() ? "" : " stroke-dasharray=\"" + d + "\"") << "/>";
    if (!s.dashed) o << marker(j, lx + 12, row_top - 7, 3.5, c, c);
    o << text_lines(legend_lines[j], lx + 30, row_top - 3, "start", "legend");
  }
  o << "</svg>";
  return o.str();
}

std::string scatter(const std::string& title, const std::vector<ScatterPoint>& points, const std::vector<size_t>& front,
                    const std::string& x_label, const std::string& y_label, int width, bool diagonal) {
  if (points.empty()) return no_data(width, title);
  double x_lo = INFINITY, x_hi = 0, y_hi = 0;
  for (const ScatterPoint& p : points) x_lo = std::min(x_lo, p.x), x_hi = std::max(x_hi, p.x), y_hi = std::max(y_hi, p.y);
  // x (memory) from a little below the lightest point, so close points stay apart; y (throughput) from 0.
  const double pad = std::max((x_hi - x_lo) * 0.15, x_hi * 0.05);
  if (diagonal) x_hi = y_hi = std::max(x_hi, y_hi);
  const std::vector<double> x_ticks = diagonal ? nice_ticks(0, x_hi > 0 ? x_hi : 1)
                                               : nice_ticks(std::max(0.0, x_lo - pad), x_hi > 0 ? x_hi + pad : 1),
                            y_ticks = nice_ticks(0, y_hi > 0 ? y_hi : 1);
  const double plot_h = 240;
  const double left = 70, right = width - 16, top = 34 + title_extra(width, title), bottom = top + plot_h;
  const int height = static_cast<int>(bottom) + 44;
  const double xa = x_ticks.front(), xb = std::max(x_ticks.back(), xa + 1e-9);
  const auto px = [&](double v) { return left + (right - left) * (v - xa) / (xb - xa); };
  const auto py = [&](double v) { return bottom - plot_h * v / y_ticks.back(); };
  std::ostringstream o;
  o << open_svg(width, height, title);
  const double ys = y_ticks.size() > 1 ? y_ticks[1] - y_ticks[0] : 1, xs = x_ticks.size() > 1 ? x_ticks[1] - x_ticks[0] : 1;
  for (double t : y_ticks)
    o << "<line x1=\"" << num(left) << "\" y1=\"" << num(py(t)) << "\" x2=\"" << num(right) << "\" y2=\"" << num(py(t))
      << "\" stroke=\"" << kGridColor << "\"/><text x=\"" << num(left - 6) << "\" y=\"" << num(py(t) + 4)
      << "\" text-anchor=\"end\" fill=\"#555\">" << tick_text(t, ys) << "</text>";
  for (double t : x_ticks)
    o << "<line x1=\"" << num(px(t)) << "\" y1=\"" << num(top) << "\" x2=\"" << num(px(t)) << "\" y2=\""
      << num(bottom) << "\" stroke=\"" << kGridColor << "\"/><text x=\"" << num(px(t)) << "\" y=\""
      << num(bottom + 15) << "\" text-anchor=\"middle\" fill=\"#555\">" << tick_text(t, xs) << "</text>";
  o << "<polyline points=\"" << num(left) << "," << num(top) << " " << num(left) << "," << num(bottom) << " "
    << num(right) << "," << num(bottom) << "\" fill=\"none\" stroke=\"" << kAxisColor << "\"/>"
    << "<text x=\"" << num((left + right) / 2) << "\" y=\"" << num(bottom + 32)
    << "\" text-anchor=\"middle\" fill=\"#333\">" << fmt::html_escape(x_label) << "</text>"
    << "<text transform=\"translate(14," << num((top + bottom) / 2) << ") rotate(-90)\" text-anchor=\"middle\" "
    << "fill=\"#333\">" << fmt::html_escape(y_label) << "</text>";
  if (diagonal) {
    const double end = std::min(x_ticks.back(), y_ticks.back());
    o << "<line class=\"diagonal\" x1=\"" << num(px(0)) << "\" y1=\"" << num(py(0)) << "\" x2=\"" << num(px(end))
      << "\" y2=\"" << num(py(end)) << "\" stroke=\"#222\" stroke-dasharray=\"6 4\"/>";
  }
  // The front as a staircase: from each front point right to the next one's memory, then up.
  if (!front.empty()) {
    o << "<polyline class=\"front\" fill=\"none\" stroke=\"" << color(1) << "\" stroke-width=\"2\" points=\"";
    for (size_t k = 0; k < front.size(); ++k) {
      const ScatterPoint& p = points[front[k]];
      if (k) o << num(px(p.x)) << "," << num(py(points[front[k - 1]].y)) << " ";
      o << num(px(p.x)) << "," << num(py(p.y)) << " ";
    }
    o << num(right) << "," << num(py(points[front.back()].y)) << "\"/>";
  }
  for (const ScatterPoint& p : points) {
    const bool on = std::find(front.begin(), front.end(), static_cast<size_t>(&p - points.data())) != front.end();
    o << "<g><title>" << fmt::html_escape(p.label + ": " + p.hover) << "</title>"
      << marker(on ? 0 : 1, px(p.x), py(p.y), on ? 4.5 : 3.5, on ? color(1) : "#fff", on ? "#222" : color(0))
      << "</g>";
  }
  // Names beside the named points (left of the point in the right half),
  // moved down past a name already placed; tags only where they overlap
  // nothing (every point's values are in its hover text and the tables).
  struct Box {
    double x0, y0, x1, y1;
  };
  std::vector<Box> taken;
  const auto free = [&](const Box& b) {
    return std::none_of(taken.begin(), taken.end(),
                        [&](const Box& t) { return b.x0 < t.x1 && t.x0 < b.x1 && b.y0 < t.y1 && t.y0 < b.y1; });
  };
  for (const ScatterPoint& p : points) {
    if (!p.named) continue;
    const bool right_half = px(p.x) > (left + right) / 2;
    const std::vector<std::string> lines = wrap(p.label, 28);
    size_t chars = 0;
    for (const std::string& l : lines) chars = std::max(chars, l.size());
    const double w = kCharWidth * static_cast<double>(chars), h = kLineHeight * static_cast<double>(lines.size());
    const double tx = px(p.x) + (right_half ? -8 : 8);
    double ty = py(p.y) - 6;
    Box b{right_half ? tx - w : tx, ty - 11, right_half ? tx : tx + w, ty - 11 + h};
    for (int tries = 0; tries < 12 && !free(b); ++tries) b.y0 += kLineHeight, b.y1 += kLineHeight, ty += kLineHeight;
    taken.push_back(b);
    o << text_lines(lines, tx, ty, right_half ? "end" : "start", "label");
  }
  for (const ScatterPoint& p : points) {
    if (p.named || p.tag.empty()) continue;
    const Box b{px(p.x) + 5, py(p.y) + 3, px(p.x) + 5 + 6.0 * static_cast<double>(p.tag.size()), py(p.y) + 13};
    if (!free(b)) continue;
    taken.push_back(b);
    o << "<text x=\"" << num(b.x0) << "\" y=\"" << num(py(p.y) + 12) << "\" font-size=\"10\" fill=\"#777\">"
      << fmt::html_escape(p.tag) << "</text>";
  }
  o << "</svg>";
  return o.str();
}

std::string forest_plot(const std::string& title, const std::vector<std::string>& panels,
                        const std::vector<ForestRow>& rows, int width) {
  if (rows.empty() || panels.empty()) return no_data(width, title);
  size_t longest = 0;
  for (const ForestRow& r : rows) longest = std::max(longest, r.label.size());
  const size_t label_chars = std::min<size_t>(longest, static_cast<size_t>(0.25 * width / kCharWidth));
  const double label_w = 16 + kCharWidth * static_cast<double>(label_chars);
  const double panel_w = (width - label_w - 8) / static_cast<double>(panels.size());
  const double text_w = 150;  // the estimate's text at each panel's right
  const double top = 48 + title_extra(width, title);
  std::vector<std::vector<std::string>> labels;
  std::vector<double> row_y;
  double y = top;
  for (const ForestRow& r : rows) {
    labels.push_back(wrap(r.label, label_chars));
    row_y.push_back(y);
    y += kRowHeight + kLineHeight * static_cast<double>(labels.back().size() - 1);
  }
  const double bottom = y;
  const int height = static_cast<int>(bottom) + 40;
  std::ostringstream o;
  o << open_svg(width, height, title);
  for (size_t i = 0; i < rows.size(); ++i) o << text_lines(labels[i], label_w - 8, row_y[i] + 15, "end", "label");
  for (size_t c = 0; c < panels.size(); ++c) {
    const double x0 = label_w + panel_w * static_cast<double>(c) + 10, x1 = x0 + panel_w - text_w - 20;
    // A log axis symmetric about 1x, wide enough for every interval of this panel.
    double span = std::log(1.25);
    for (const ForestRow& r : rows)
      if (c < r.cells.size() && r.cells[c])
        span = std::max({span, std::fabs(std::log(r.cells[c]->lo)), std::fabs(std::log(r.cells[c]->hi))});
    span *= 1.1;
    const auto x = [&](double ratio) { return x0 + (x1 - x0) * (std::log(ratio) + span) / (2 * span); };
    o << "<text x=\"" << num((x0 + x1) / 2) << "\" y=\"" << num(top - 14) << "\" text-anchor=\"middle\" "
      << "font-weight=\"bold\" fill=\"#333\">" << fmt::html_escape(panels[c]) << "</text>";
    std::vector<double> ticks;
    for (double t : {0.1, 0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 4.0, 10.0})
      if (std::fabs(std::log(t)) <= span) ticks.push_back(t);
    // 1x first, then outwards; a tick closer than a label's width to one kept is dropped.
    std::stable_sort(ticks.begin(), ticks.end(),
                     [](double a, double b) { return std::fabs(std::log(a)) < std::fabs(std::log(b)); });
    std::vector<double> kept;
    for (double t : ticks)
      if (std::none_of(kept.begin(), kept.end(), [&](double k) { return std::fabs(x(k) - x(t)) < 44; }))
        kept.push_back(t);
    for (double t : kept) {
      o << "<line x1=\"" << num(x(t)) << "\" y1=\"" << num(top) << "\" x2=\"" << num(x(t)) << "\" y2=\""
        << num(bottom) << "\" stroke=\"" << (t == 1.0 ? "#888" : kGridColor) << "\""
        << (t == 1.0 ? " stroke-dasharray=\"4 3\"" : "") << "/><text x=\"" << num(x(t)) << "\" y=\""
        << num(bottom + 14) << "\" text-anchor=\"middle\" fill=\"#555\">" << fmt::ratio(t) << "</text>";
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      if (c >= rows[i].cells.size() || !rows[i].cells[c]) continue;
      const Estimate& e = *rows[i].cells[c];
      const double cy = row_y[i] + kRowHeight / 2.0;
      const std::string col = e.median >= 1 ? color(0) : color(3);
      o << "<g><title>" << fmt::html_escape(rows[i].label + ", " + panels[c] + ": " + e.text) << "</title>"
        << "<line x1=\"" << num(x(e.lo)) << "\" y1=\"" << num(cy) << "\" x2=\"" << num(x(e.hi)) << "\" y2=\""
        << num(cy) << "\" stroke=\"#222\" stroke-width=\"1.5\"/>"
        << marker(e.median >= 1 ? 1 : 3, x(e.median), cy, 4.5, col, "#222") << "<text x=\"" << num(x1 + 12)
        << "\" y=\"" << num(cy + 4) << "\" fill=\"#222\">" << fmt::html_escape(e.text) << "</text></g>";
    }
  }
  o << "<text x=\"" << num(label_w) << "\" y=\"" << num(bottom + 30) << "\" fill=\"#555\">"
    << "ratio to the setting's first value (log scale); the line is the interval, the mark the median</text></svg>";
  return o.str();
}

std::string stacked_shares(const std::string& title, const std::vector<std::string>& parts,
                           const std::vector<StackedRow>& rows, int width, const std::vector<std::string>& colors) {
  const auto paint = [&colors](size_t k) { return k < colors.size() ? colors[k] : color(k); };
  std::vector<const StackedRow*> shown;
  for (const StackedRow& r : rows) {
    double total = 0;
    for (double v : r.values) total += std::max(v, 0.0);
    if (total > 0) shown.push_back(&r);
  }
  if (shown.empty()) return no_data(width, title);
  const int top = 30 + title_extra(width, title), legend = 22, label_w = 190, text_w = 80;
  const int plot_w = width - label_w - text_w - 16;
  std::vector<std::vector<std::string>> labels;
  int height = top + legend + 8;
  for (const StackedRow* r : shown) {
    labels.push_back(wrap(r->label, static_cast<size_t>((label_w - 12) / kCharWidth)));
    height += std::max(kRowHeight, static_cast<int>(labels.back().size()) * kLineHeight + 8);
  }
  std::ostringstream o;
  o << open_svg(width, height + 8, title);
  double lx = 8;  // the legend: a swatch and the part's name each
  for (size_t k = 0; k < parts.size(); ++k) {
    o << "<rect x=\"" << num(lx) << "\" y=\"" << top + 4 << "\" width=\"10\" height=\"10\" fill=\"" << paint(k)
      << "\"/><text x=\"" << num(lx + 14) << "\" y=\"" << top + 13 << "\" fill=\"#222\">" << fmt::html_escape(parts[k])
      << "</text>";
    lx += 30 + 7.2 * static_cast<double>(parts[k].size());
  }
  double y = top + legend + 8;
  for (size_t i = 0; i < shown.size(); ++i) {
    const StackedRow& r = *shown[i];
    const int row_h = std::max(kRowHeight, static_cast<int>(labels[i].size()) * kLineHeight + 8);
    o << text_lines(labels[i], label_w - 6, y + 15, "end", "label");
    double total = 0;
    for (double v : r.values) total += std::max(v, 0.0);
    double x = label_w;
    for (size_t k = 0; k < r.values.size() && k < parts.size(); ++k) {
      const double w = plot_w * std::max(r.values[k], 0.0) / total;
      if (w <= 0) continue;
      const std::string tip =
          r.label + ": " + parts[k] + " " + fmt::seconds(r.values[k]) + " (" + fmt::fixed(100 * r.values[k] / total, 1) + "%)";
      o << "<rect x=\"" << num(x) << "\" y=\"" << num(y + 3) << "\" width=\"" << num(w) << "\" height=\"" << row_h - 8
        << "\" fill=\"" << paint(k) << "\"><title>" << fmt::html_escape(tip) << "</title></rect>";
      x += w;
    }
    o << "<text x=\"" << label_w + plot_w + 6 << "\" y=\"" << num(y + 15) << "\" fill=\"#222\">"
      << fmt::html_escape(r.text) << "</text>";
    y += row_h;
  }
  o << "</svg>";
  return o.str();
}

std::string heat_map(const std::string& title, const std::vector<std::string>& row_labels,
                     const std::vector<std::string>& column_labels, const std::vector<std::vector<double>>& values,
                     std::string (*format)(double), double lo, double hi, int width) {
  const bool any = std::any_of(values.begin(), values.end(), [](const std::vector<double>& row) {
    return std::any_of(row.begin(), row.end(), [](double v) { return std::isfinite(v); });
  });
  if (!any || column_labels.empty()) return no_data(width, title);
  const int top = 30 + title_extra(width, title), label_w = 70, cell_h = 18;
  const int cols = static_cast<int>(column_labels.size());
  const double cell_w = static_cast<double>(width - label_w - 16) / cols;
  const int height = top + cell_h * static_cast<int>(values.size()) + 48;
  // Light to dark blue; equal values all mid-tone.
  const auto shade = [&](double v) {
    const double t = hi > lo ? std::clamp((v - lo) / (hi - lo), 0.0, 1.0) : 0.5;
    char buf[8];
    std::snprintf(buf, sizeof buf, "#%02x%02x%02x", static_cast<int>(std::lround(235 - t * 227)),
                  static_cast<int>(std::lround(243 - t * 174)), static_cast<int>(std::lround(251 - t * 103)));
    return std::string(buf);
  };
  std::ostringstream o;
  o << open_svg(width, height, title);
  for (size_t r = 0; r < values.size(); ++r) {
    const double y = top + cell_h * static_cast<double>(r);
    const std::string row = r < row_labels.size() ? row_labels[r] : "";
    o << "<text x=\"" << label_w - 6 << "\" y=\"" << num(y + 13) << "\" text-anchor=\"end\" fill=\"#222\">"
      << fmt::html_escape(row) << "</text>";
    for (int c = 0; c < cols && c < static_cast<int>(values[r].size()); ++c) {
      const double v = values[r][c];
      if (!std::isfinite(v)) continue;
      o << "<rect x=\"" << num(label_w + cell_w * c) << "\" y=\"" << num(y) << "\" width=\"" << num(cell_w + 0.3)
        << "\" height=\"" << cell_h << "\" fill=\"" << shade(v) << "\"><title>"
        << fmt::html_escape(row + ", step " + column_labels[c] + ": " + format(v)) << "</title></rect>";
    }
  }
  const double axis_y = top + cell_h * static_cast<double>(values.size());
  const int every = std::max(1, (cols + 19) / 20);
  const double hi_x = label_w + 16 + 7.2 * static_cast<double>(format(lo).size()) + 20;  // the scale's second swatch
  for (int c = 0; c < cols; c += every)
    o << "<text x=\"" << num(label_w + cell_w * (c + 0.5)) << "\" y=\"" << num(axis_y + 14)
      << "\" text-anchor=\"middle\" fill=\"#444\" font-size=\"10\">" << fmt::html_escape(column_labels[c]) << "</text>";
  o << "<rect x=\"" << label_w << "\" y=\"" << num(axis_y + 24) << "\" width=\"12\" height=\"12\" fill=\"" << shade(lo)
    << "\"/><text x=\"" << label_w + 16 << "\" y=\"" << num(axis_y + 34) << "\" fill=\"#444\">"
    << fmt::html_escape(format(lo)) << "</text><rect x=\"" << num(hi_x) << "\" y=\"" << num(axis_y + 24)
    << "\" width=\"12\" height=\"12\" fill=\"" << shade(hi) << "\"/><text x=\"" << num(hi_x + 16) << "\" y=\""
    << num(axis_y + 34) << "\" fill=\"#444\">" << fmt::html_escape(format(hi)) << "</text></svg>";
  return o.str();
}

}  // namespace ctitan::svg
