// Inline SVG charts for the HTML report: plain shapes and text, no script,
// no external fonts or styles, so the file renders offline, in an e-mail
// client or a PR artifact viewer, and prints. Each function returns one
// <svg> element sized for a ~1000 px wide page; hovering a bar or a point
// shows its exact value through SVG <title> (no JavaScript).
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace ctitan::svg {

struct Bar {
  std::string label;
  double value = 0;
  std::optional<double> lo, hi;  // error bar (e.g. p10–p90)
  std::string text;              // printed at the bar's end
  bool highlight = false;        // drawn in the accent colour (the baseline)
};

// Horizontal bars, one per row, labels on the left (a long label wraps onto
// more lines, never cut); empty `bars` gives a short "no data" note instead
// of an empty frame. `width` in px: small multiples draw narrower panels.
std::string bar_chart(const std::string& title, const std::string& axis_label, const std::vector<Bar>& bars,
                      int width = 1000);

// A label as lines of at most `max_chars` characters, broken at spaces (a
// word longer than that stands alone on its line): what bar_chart and the
// other charts draw instead of cutting a label.
std::vector<std::string> wrap(const std::string& label, size_t max_chars);

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
  bool faint = false;   // drawn thin and grey, behind the others, not in the legend (context)
  bool dashed = false;  // a reference line (the ideal); drawn in black, dashed
  // (x, lo, hi): a range shaded in the series' colour behind its line (the
  // min–max over seeds of a loss curve); empty: none.
  std::vector<std::tuple<double, double, double>> band = {};
};

struct LineChartOptions {
  std::string x_label, y_label;
  bool y_from_zero = false;
  bool integer_x = false;  // ticks only at the x values present (world sizes)
  int width = 1000;
  int plot_height = 280;
};

// Groups of bars side by side (published | predicted | measured per row):
// one colour per series, a legend on top; an absent value leaves a gap
// with "—" so "not measured" reads as such.
struct BarGroup {
  std::string label;
  std::vector<std::optional<double>> values;  // one per series
  std::vector<std::string> texts;             // printed at each bar's end
};
std::string grouped_bar_chart(const std::string& title, const std::string& axis_label,
                              const std::vector<std::string>& series, const std::vector<BarGroup>& groups,
                              int width = 1000);

// Lines with markers and a legend under the plot. Series differ in colour,
// dash pattern and marker shape, so they stay apart in grey-scale print and
// for colour-blind readers.
std::string line_chart(const std::string& title, const std::vector<Series>& series, const LineChartOptions& opts);

struct ScatterPoint {
  double x = 0, y = 0;
  std::string label;  // drawn beside the point when `named`, and in its hover text
  std::string tag;    // short mark drawn beside an unnamed point ("#12")
  std::string hover;  // the exact values, for the hover text
  bool named = false;
};

// Points (x, y) with the Pareto front drawn as a step line through the
// `front` points (indices, by x ascending) and those named by their labels
// (filled markers); the others hollow, tagged.
// With `diagonal`, both axes run from 0 on one scale and the line y = x is
// drawn dashed (predicted against measured: on the line is exact).
std::string scatter(const std::string& title, const std::vector<ScatterPoint>& points, const std::vector<size_t>& front,
                    const std::string& x_label, const std::string& y_label, int width = 1000,
                    bool diagonal = false);

// A forest plot: one row per estimate, a point at the median and a line
// over its interval, on a log-ratio axis with the line of no effect (1×),
// one panel per column (tokens/s, memory). An absent estimate leaves its
// cell empty.
struct Estimate {
  double median = 1, lo = 1, hi = 1;
  std::string text;  // "×1.23 [1.18, 1.35]", printed at the row's end and hovered
};
struct ForestRow {
  std::string label;
  std::vector<std::optional<Estimate>> cells;  // one per panel
};
std::string forest_plot(const std::string& title, const std::vector<std::string>& panels,
                        const std::vector<ForestRow>& rows, int width = 1000);

// The i-th colour of a palette readable on white and by most colour-blind
// readers (Okabe–Ito), and the i-th dash pattern ("" solid) and marker
// shape (circle, square, triangle, diamond) that go with it.
// One horizontal bar per row, each split into its parts' shares of the
// row's total (a 100 % stacked bar), a legend of `parts` above; hovering a
// segment shows the part, its seconds and share. Rows whose total is not
// positive are left out; none left: "no data". `colors`: one per part
// (empty: the palette's).
struct StackedRow {
  std::string label;
  std::vector<double> values;  // one per part, >= 0
  std::string text;            // printed after the bar (e.g. the total)
};
std::string stacked_shares(const std::string& title, const std::vector<std::string>& parts,
                           const std::vector<StackedRow>& rows, int width = 1000,
                           const std::vector<std::string>& colors = {});

// A grid of cells, rows[r][c] shaded from light (`lo`) to dark (`hi`;
// values beyond are clamped), row and column labels on the axes (at most
// ~20 column labels are printed), the scale's ends under it; NaN cells are
// blank. Hovering a cell shows its row, column and value (`format`).
std::string heat_map(const std::string& title, const std::vector<std::string>& row_labels,
                     const std::vector<std::string>& column_labels, const std::vector<std::vector<double>>& values,
                     std::string (*format)(double), double lo, double hi, int width = 640);

std::string color(size_t i);
std::string dash(size_t i);
std::string marker(size_t i, double x, double y, double r, const std::string& fill, const std::string& stroke);

// Evenly spaced "nice" tick values (1, 2 or 5 × 10^k apart) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

}  // namespace ctitan::svg
