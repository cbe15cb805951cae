// Published reproductions: recipes/published/*.toml are sweep specs (so
// `ctitan sweep` runs them on a cluster) whose [published] table carries
// the figures a publication reports for some of their points: TorchTitan's
// benchmark tables, each row with its source.
//
//   [published]
//   source = "pytorch/torchtitan benchmarks/... Table 1 (commit)"
//   hardware = "h100_sxm_500w"          # recipes/hardware/NAME.toml
//   gpus = 8                            # world size of the rows (a row may set its own)
//   [[published.rows]]
//   label = "FSDP + torch.compile"      # the publication's name for the row
//   stack = "+compile"                  # the [[stack]] row it is (when the spec has stacks)
//   point = { training.seq_len = 65536 } # settings that pick it among the other points
//   tps = 6667                          # tokens/s per GPU
//   mem_gib = 77.0                      # optional: peak memory per GPU
//   mfu_pct = 58.2                      # optional
//
// A row describes exactly one point of the sweep at its world size: the
// point of its stack row whose resolved config has every `point` setting.
// Every row is predicted with the same planner and the one spec of its
// hardware; nothing in a row tunes the prediction.
//
// Errors: a spec without [published], a row that matches no point or
// several, an unknown hardware spec — one-line InputErrors naming the file
// and line. A row the planner cannot predict is reported in its line.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "harness/sweep_spec.h"
#include "planner/hardware.h"
#include "planner/model_desc.h"
#include "reports/published.h"
#include "trainer/config/job_config.h"

namespace ctitan {

struct PublishedRow {
  std::string spec_path;    // the spec file
  std::string table;        // its stem: "llama3_8b_h100_8gpu_fsdp"
  std::string source;       // [published] source
  std::string hardware;     // the hardware spec's name
  std::string label;        // the publication's name for the row
  std::string where;        // "spec.toml:LINE" of the row
  std::string point_label;  // the sweep point's label
  int world_size = 1;
  std::string framework;    // [published] framework: what measured it
  JobConfig cfg;            // the point, resolved through plan_sweep
  ModelDesc model;          // its model: the point's, or the row's own shape keys
  bool own_model = false;   // the row names a model of its own (another framework's)
  std::string config_hash;  // config_hash(cfg): what a measured run of the point has
  std::string infeasible;   // the sweep's feasibility rules on `world_size` GPUs of the spec ("" = runnable)
  double tps = 0;           // tokens/s per GPU
  std::optional<double> mem_gib, mfu_pct;
};

// The shipped tables: ./recipes/published when it exists, else the source
// tree's recipes/published.
std::string published_dir();

// Every row of every *.toml in `dir_or_file` (a folder, sorted by name, or
// one spec), in file order.
std::vector<PublishedRow> load_published(const std::string& dir_or_file);

// What a sweep may assume on `gpus` devices of `hw`: that many GPUs, each
// with the spec's memory, predicted on `hw`.
DeviceBudget published_budget(const HardwareSpec& hw, int gpus);

// The lower-case token a GPU's name must contain to count as a device of
// spec `name`: its first '_'-separated part ("h100" for "h100_sxm_500w").
std::string gpu_match_token(const std::string& name);

// Published and predicted, as the report's plain data: predict() for every
// row on its hardware spec, with the spec's title and calibration source.
PublishedReport predict_published(const std::vector<PublishedRow>& rows);

// `ctitan plan --validate PATH [--json]`: predicted vs published tokens/s
// per GPU and memory per GPU for every row, the error of each and their
// medians; every prediction labelled with its hardware spec and calibration.
// Returns 0 (the errors are the result, not a failure).
int validate_published(const std::string& dir_or_file, bool json, std::ostream& out);

}  // namespace ctitan
