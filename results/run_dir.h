// Reading a run directory (what `ctitan train` writes: metrics.jsonl,
// summary.json, env.json, traces, checkpoints) into rows, and writing those
// rows. Reading happens before the write transaction, so the database lock
// is held only while rows are written.
#pragma once

#include <sqlite3.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "results/results_db.h"

namespace ctitan::results_detail {

struct RunDirContents {
  std::vector<nlohmann::json> steps;  // metrics.jsonl step lines that parsed, in file order
  std::vector<nlohmann::json> validation;  // its validation lines ("validation_loss")
  std::optional<SummaryRow> summary;
  // summary.json's comm_by_dim: mesh dimension -> (comm_s, exposed_comm_s).
  std::vector<std::tuple<std::string, std::optional<double>, std::optional<double>>> comm_dims;
  std::vector<std::pair<std::string, std::optional<std::string>>> env;  // dotted keys
  std::vector<ArtifactRow> artifacts;
  std::vector<std::pair<std::string, double>> goodput;  // summary.json's goodput parts
  std::vector<RankStepRow> rank_steps;                 // summary.json's stragglers.by_step
  IngestReport report;  // partial, notes, summary_status (counts are set when written)
};

RunDirContents read_run_dir(const std::string& run_dir);

// The three files read_run_dir parses, from their text (tests/fuzz/ feeds
// these arbitrary bytes). Nothing here throws for bad input: a line or file
// that does not parse (invalid JSON, nesting past 64 levels, no integer
// "step") is left out with a one-line note in c.report, and the run is
// marked partial.
void parse_metrics_jsonl(std::string_view text, RunDirContents& c);
void parse_summary_json(std::string_view text, RunDirContents& c);
void parse_env_json(std::string_view text, RunDirContents& c);

// Nested objects become dotted keys ({"a": {"b": 1}} → "a.b" = "1"); strings
// are stored as they are, other values as their JSON text, null as NULL.
void flatten_json(const nlohmann::json& j, const std::string& prefix,
                  std::vector<std::pair<std::string, std::optional<std::string>>>& out);

// INSERT OR REPLACE of one summaries row (inside the caller's transaction).
void write_summary(sqlite3* db, const std::string& path, const SummaryRow& s);

}  // namespace ctitan::results_detail
