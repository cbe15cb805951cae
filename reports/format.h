// Number and text formatting shared by the report and gate renderers, so a
// value reads the same in Markdown, HTML and the gate's summary.
#pragma once

#include <optional>
#include <string>

namespace ctitan::fmt {

std::string fixed(double v, int decimals);                      // "%.*f"
std::string grouped(double v);                                  // 12345.6 → "12,346"
std::string bytes(double b);                                    // "812.3 MiB", "1.25 GiB"
std::string signed_percent(double fraction, int decimals = 1);  // 0.123 → "+12.3%", −0.04 → "−4.0%"
std::string ratio(double r);                                    // 1.234 → "1.23×"
std::string seconds(double s);                                  // "12.3 ms", "1.25 s"
std::string mfu_percent(double pct);  // 41.234 → "41.23%", 0.0123 → "0.0123%" (CPU runs are tiny)
std::string or_dash(const std::optional<double>& v, std::string (*f)(double));
std::string p_value(double p);  // "0.003", "<0.001"

std::string html_escape(const std::string& s);

// One CSV cell: RFC 4180 quoting, and text a spreadsheet would run as a
// formula (starting with '=', '+', '-', '@', a tab or a CR; OWASP "CSV
// injection") gets a leading "'" inside quotes. A cell that is a plain
// number ("-3", "-1.5e-3") stays a number.
std::string csv_cell(const std::string& s);
std::string md_escape(const std::string& s);  // a table cell: pipes, angle brackets and backticks neutralised

}  // namespace ctitan::fmt
