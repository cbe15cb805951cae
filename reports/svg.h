// Inline SVG charts for the HTML report: plain shapes and text, no script,
// no external fonts or styles, so the file renders offline, in an e-mail
// client or a PR artifact viewer, and prints. Each function returns one
// <svg> element sized for a ~1000 px wide page; hovering a bar or a point
// shows its exact value through SVG <title> (no JavaScript).
#pragma once

#include <optional>
#include <string>
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

// Horizontal bars, one per row, labels on the left; empty `bars` gives a
// short "no data" note instead of an empty frame.
std::string bar_chart(const std::string& title, const std::string& axis_label, const std::vector<Bar>& bars);

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct LineChartOptions {
  std::string x_label, y_label;
  bool y_from_zero = false;
  bool integer_x = false;  // ticks only at the x values present (world sizes)
};

// Lines with markers and a legend under the plot.
std::string line_chart(const std::string& title, const std::vector<Series>& series, const LineChartOptions& opts);

// The i-th colour of a palette readable on white and by most colour-blind readers.
std::string color(size_t i);

// Evenly spaced "nice" tick values (1, 2 or 5 × 10^k apart) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

}  // namespace ctitan::svg
