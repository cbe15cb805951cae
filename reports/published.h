// Published reproductions side by side: for each row of a published table
// (recipes/published/*.toml), the figures the publication reports, the
// planner's prediction and what this database measured for the same point
// — each column labelled for what it is.
//
// The reports library does not link the planner: the harness
// (harness/published.h) fills the published and predicted fields as plain
// data; measure_published() adds the measured ones from a results
// database. A run counts as a measurement of a row when its config hash and
// world size are the row's, its status is ok, and its GPU's name (env
// gpu_name) contains the row's gpu_match token ("h100" for the
// h100_sxm_500w spec); ok runs of the point on other devices are counted in
// the note, never in the figure.
//
// Errors are (predicted - published) / published; the medians are over the
// absolute errors of the rows that have both numbers.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ctitan {

class ResultsDb;

struct PublishedPoint {
  std::string table;      // the spec file's stem: "llama3_8b_h100_8gpu_fsdp"
  std::string source;     // where the figures were published
  std::string label;      // the publication's name for the row
  std::string where;      // "recipes/published/x.toml:31", the row in its spec
  std::string hardware;   // the hardware spec the row ran on and is predicted for
  std::string gpu_match;  // lower-case token a measuring GPU's name contains
  int64_t world_size = 1;
  std::string config_hash;  // of the resolved point (sweep_spec.h config_hash)

  double published_tps = 0;  // tokens/s per GPU
  std::optional<double> published_mem_gib, published_mfu_pct;

  std::optional<double> predicted_tps, predicted_mem_gib, predicted_mfu_pct;
  bool predicted_fits = true;  // the predicted memory fits the device
  std::string not_predicted;   // why there is no prediction ("" when there is one)

  std::optional<double> measured_tps, measured_mem_gib;  // medians over the matching runs
  size_t measured_runs = 0;
  std::string measured_on;    // the GPU name(s) of those runs
  std::string measured_note;  // "not measured", ok runs on other devices, ...
  // Set: ctitan never runs this row (another framework's model), so no run
  // of the point's config counts as its measurement; the note says why.
  std::string not_run;
};

struct PublishedHardware {
  std::string name, title, calibration;  // the spec's name, title and calibration source
};

struct PublishedReport {
  std::vector<PublishedHardware> hardware;  // every spec a row names, sorted by name
  std::vector<PublishedPoint> rows;         // in table order
  std::string db_path;                      // "" until measure_published()
};

// Absolute errors in percent, their median and count; n == 0 leaves the median 0.
struct ErrorSummary {
  double median_abs_pct = 0;
  size_t n = 0;
};
std::optional<double> error_pct(const std::optional<double>& predicted, double published);
ErrorSummary tps_errors(const PublishedReport& r);
ErrorSummary mem_errors(const PublishedReport& r);

// Fills the measured fields of every row from `db` and sets db_path.
void measure_published(const ResultsDb& db, PublishedReport& r);

// The terminal table of `ctitan plan --validate`: a header naming every
// hardware spec and its calibration, one line per row ending with
// "[predicted: SPEC]", the median errors, the sources.
std::string render_published_text(const PublishedReport& r);
// The report section (published | predicted | measured) in Markdown and as
// an HTML fragment (<section>...</section>); a whole HTML document when no
// other report surrounds it; CSV rows; JSON.
std::string render_published_markdown(const PublishedReport& r);
std::string render_published_html_section(const PublishedReport& r);
std::string render_published_html(const PublishedReport& r);
std::string render_published_csv(const PublishedReport& r);
nlohmann::json render_published_json(const PublishedReport& r);

}  // namespace ctitan
