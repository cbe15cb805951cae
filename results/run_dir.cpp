// Run directory → rows. The trainer's file formats are in trainer/metrics.cpp
// (metrics.jsonl lines, summary.json) and profiling/env_info.cpp (env.json);
// only rank 0 writes them, so every step row has rank 0.
//
// A crashed run leaves what it had: a metrics.jsonl whose last line was cut
// mid-write, no summary.json. Those are stored as far as they go and the
// report says partial, with one note per missing piece.
#include "results/run_dir.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/errors.h"
#include "common/run_timing.h"
#include "results/sqlite_stmt.h"

namespace fs = std::filesystem;

namespace ctitan::results_detail {
namespace {

// env.json is flattened recursively; nothing a run writes nests this deep.
constexpr int kMaxJsonDepth = 64;

std::optional<double> number(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// An integer field; a float counts when it is a whole number in int64's
// range (a cast of anything else would be undefined).
std::optional<int64_t> integer(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  if (it->is_number_unsigned()) {
    const auto u = it->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (it->is_number_integer()) return it->get<int64_t>();
  const double d = it->get<double>();
  if (!(d >= -9.2e18 && d <= 9.2e18) || d != std::floor(d)) return std::nullopt;
  return static_cast<int64_t>(d);
}

// Parses one document; nullopt (discarded) for invalid JSON or nesting past kMaxJsonDepth.
std::optional<nlohmann::json> parse_bounded(std::string_view text) {
  bool too_deep = false;
  nlohmann::json j = nlohmann::json::parse(
      text.begin(), text.end(),
      [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
        too_deep = too_deep || depth > kMaxJsonDepth;
        return !too_deep;
      },
      /*allow_exceptions=*/false);
  if (too_deep || j.is_discarded()) return std::nullopt;
  return j;
}

// A whole file of a run directory; nullopt when it cannot be read, and for
// anything but a regular file (a FIFO would block the ingest).
std::optional<std::string> read_text(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void read_metrics(const fs::path& file, RunDirContents& c) {
  const auto text = read_text(file);
  if (!text) {
    c.report.partial = true;
    c.report.notes.push_back("metrics.jsonl is missing: no step rows");
    return;
  }
  parse_metrics_jsonl(*text, c);
}

void read_summary(const fs::path& file, RunDirContents& c) {
  const auto text = read_text(file);
  if (!text) {
    c.report.partial = true;
    c.report.notes.push_back("summary.json is missing: the run did not finish");
    return;
  }
  parse_summary_json(*text, c);
}

void read_env(const fs::path& file, RunDirContents& c) {
  const auto text = read_text(file);
  if (!text) {
    c.report.notes.push_back("env.json is missing: no env rows");
    return;
  }
  parse_env_json(*text, c);
}

bool is_checkpoint_step(const fs::path& dir) {
  return dir.filename().string().rfind("step-", 0) == 0 && fs::exists(dir / "metadata.json");
}

// The artifact kind of a file in the run directory, or "" to leave it out.
std::string artifact_kind(const fs::path& rel) {
  const std::string name = rel.filename().string();
  const std::string parent = rel.parent_path().filename().string();
  const std::string ext = rel.extension().string();
  if (rel == "config.toml") return "config";
  if (rel == "metrics.jsonl") return "metrics";
  if (rel == "summary.json") return "summary";
  if (rel == "env.json") return "env";
  if (parent == "comm_traces" && ext == ".json") return "comm_trace";
  if (parent == "memory_snapshot" || name.find("snapshot") != std::string::npos) return "memory_snapshot";
  if (name.find("trace") != std::string::npos && (ext == ".json" || name.ends_with(".json.gz"))) return "trace";
  if (ext == ".log" || ext == ".out" || ext == ".err") return "log";
  return "";
}

void find_artifacts(const fs::path& root, RunDirContents& c) {
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const fs::path p = it->path();
    if (it->is_directory()) {
      // A checkpoint is one artifact (its folder); its shards are not listed,
      // and a half-written .step-N.tmp is not a checkpoint.
      const std::string name = p.filename().string();
      if (is_checkpoint_step(p)) c.artifacts.push_back({"checkpoint", p.string()});
      if (is_checkpoint_step(p) || name.rfind(".step-", 0) == 0) it.disable_recursion_pending();
      continue;
    }
    const std::string kind = artifact_kind(p.lexically_relative(root));
    if (!kind.empty()) c.artifacts.push_back({kind, p.string()});
  }
  std::sort(c.artifacts.begin(), c.artifacts.end(),
            [](const ArtifactRow& a, const ArtifactRow& b) { return a.path < b.path; });
}

}  // namespace

void parse_metrics_jsonl(std::string_view text, RunDirContents& c) {
  int64_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    const bool last = end == std::string_view::npos || end + 1 == text.size();
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.empty()) continue;
    std::optional<nlohmann::json> j = parse_bounded(line);
    if (!j || !j->is_object() || !integer(*j, "step")) {
      c.report.partial = true;
      c.report.notes.push_back("metrics.jsonl line " + std::to_string(line_no) +
                               (last ? " is cut short (the run stopped mid-write): skipped"
                                     : " is not a JSON object with a step: skipped"));
      continue;
    }
    (j->contains("validation_loss") ? c.validation : c.steps).push_back(std::move(*j));
  }
}

namespace {

// The i-th number of the array j[key], if it is one.
std::optional<double> nth(const nlohmann::json& j, const char* key, size_t i) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || i >= it->size() || !(*it)[i].is_number()) return std::nullopt;
  return (*it)[i].get<double>();
}

// summary.json's stragglers, goodput and the MFU's peak (issue 59).
void read_timing(const nlohmann::json& j, SummaryRow& s, RunDirContents& c) {
  s.peak_flops = number(j, "peak_flops");
  if (s.peak_flops && *s.peak_flops <= 0) s.peak_flops.reset();  // 0: no peak known
  if (auto it = j.find("peak_flops_source"); it != j.end() && it->is_string()) s.peak_flops_source = it->get<std::string>();
  s.mfu_by_dtype = number(j, "mfu_by_dtype");
  s.useful_mfu = number(j, "useful_mfu");
  if (auto st = j.find("stragglers"); st != j.end() && st->is_object()) {
    s.straggler_rank = integer(*st, "slowest_rank");
    s.straggler_persistence = number(*st, "persistence");
    s.straggler_share = number(*st, "share");
    s.straggler_spread_s = number(*st, "spread_s");
    if (auto m = st->find("marked"); m != st->end() && m->is_boolean()) s.straggler_marked = m->get<bool>();
    if (auto rows = st->find("by_step"); rows != st->end() && rows->is_array()) {
      for (const nlohmann::json& row : *rows) {
        const std::optional<int64_t> step = row.is_object() ? integer(row, "step") : std::nullopt;
        if (!step) continue;
        const auto busy = row.find("busy_s");
        const size_t ranks = busy != row.end() && busy->is_array() ? std::min<size_t>(busy->size(), 4096) : 0;
        for (size_t r = 0; r < ranks; ++r)
          c.rank_steps.push_back({*step, static_cast<int>(r), nth(row, "busy_s", r), nth(row, "data_s", r),
                                  nth(row, "exposed_comm_s", r)});
      }
    }
  }
  if (auto g = j.find("goodput"); g != j.end() && g->is_object()) {
    s.wall_s = number(*g, "wall_s");
    s.goodput = number(*g, "goodput");
    s.steady_tokens = integer(*g, "steady_tokens");
    for (const std::string& part : goodput_part_names())
      if (const auto v = number(*g, part.c_str())) c.goodput.emplace_back(part, *v);
  }
}

}  // namespace

void parse_summary_json(std::string_view text, RunDirContents& c) {
  const std::optional<nlohmann::json> parsed = parse_bounded(text);
  if (!parsed || !parsed->is_object()) {
    c.report.partial = true;
    c.report.notes.push_back("summary.json is not a JSON object: no summary row");
    return;
  }
  const nlohmann::json& j = *parsed;
  SummaryRow s;
  s.tps_median = number(j, "tps_median");
  s.tps_p10 = number(j, "tps_p10");
  s.tps_p90 = number(j, "tps_p90");
  s.tflops = number(j, "tflops");
  s.mfu = number(j, "mfu");
  s.mem_peak_bytes = integer(j, "mem_peak_bytes");
  s.loss_final = number(j, "loss_final");
  s.compute_s = number(j, "compute_s");
  s.comm_s = number(j, "comm_s");
  s.exposed_comm_s = number(j, "exposed_comm_s");
  s.idle_s = number(j, "idle_s");
  s.pipeline_bubble = number(j, "pipeline_bubble");
  s.pipeline_bubble_theory = number(j, "pipeline_bubble_theory");
  s.moe_ep_imbalance = number(j, "moe_ep_imbalance");
  if (auto q = j.find("quality"); q != j.end() && q->is_object()) {
    s.seed = integer(*q, "seed");
    s.validation_loss_final = number(*q, "final_validation_loss");
    s.target_loss = number(*q, "target_loss");
    s.tokens_to_target = number(*q, "tokens_to_target");
    s.time_to_target_s = number(*q, "time_to_target_s");
  }
  read_timing(j, s, c);
  c.summary = s;
  if (auto it = j.find("comm_by_dim"); it != j.end() && it->is_object())
    for (auto d = it->begin(); d != it->end(); ++d)
      if (d->is_object()) c.comm_dims.emplace_back(d.key(), number(*d, "comm_s"), number(*d, "exposed_comm_s"));
  if (auto it = j.find("status"); it != j.end() && it->is_string()) c.report.summary_status = it->get<std::string>();
}

void parse_env_json(std::string_view text, RunDirContents& c) {
  const std::optional<nlohmann::json> j = parse_bounded(text);
  if (!j || !j->is_object()) {
    c.report.notes.push_back("env.json is not a JSON object (of at most " + std::to_string(kMaxJsonDepth) +
                             " levels): no env rows");
    return;
  }
  flatten_json(*j, "", c.env);
}

void flatten_json(const nlohmann::json& j, const std::string& prefix,
                  std::vector<std::pair<std::string, std::optional<std::string>>>& out) {
  if (j.is_object() && !(j.empty() && !prefix.empty())) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten_json(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else if (j.is_null()) {
    out.emplace_back(prefix, std::nullopt);
  } else {
    out.emplace_back(prefix, j.is_string() ? j.get<std::string>() : j.dump());
  }
}

RunDirContents read_run_dir(const std::string& run_dir) {
  RunDirContents c;
  const fs::path root = fs::absolute(run_dir).lexically_normal();
  if (!fs::is_directory(root)) {
    c.report.partial = true;
    c.report.notes.push_back("run directory " + root.string() + " does not exist: nothing to ingest");
    return c;
  }
  read_metrics(root / "metrics.jsonl", c);
  read_summary(root / "summary.json", c);
  read_env(root / "env.json", c);
  find_artifacts(root, c);
  return c;
}

void write_summary(sqlite3* db, const std::string& path, const SummaryRow& s) {
  Statement q(db, path,
              "INSERT OR REPLACE INTO summaries(run_id, tps_median, tps_p10, tps_p90, tflops, mfu, mem_peak_bytes, "
              "loss_final, compute_s, comm_s, exposed_comm_s, idle_s, pipeline_bubble, pipeline_bubble_theory, "
              "moe_ep_imbalance, seed, validation_loss_final, target_loss, tokens_to_target, time_to_target_s, "
              "straggler_rank, straggler_persistence, straggler_share, straggler_spread_s, straggler_marked, wall_s, "
              "goodput, peak_flops, peak_flops_source, mfu_by_dtype, useful_mfu, steady_tokens) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, "
              "?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32)");
  q.bind_all(s.run_id, s.tps_median, s.tps_p10, s.tps_p90, s.tflops, s.mfu, s.mem_peak_bytes, s.loss_final,
             s.compute_s, s.comm_s, s.exposed_comm_s, s.idle_s, s.pipeline_bubble, s.pipeline_bubble_theory,
             s.moe_ep_imbalance, s.seed, s.validation_loss_final, s.target_loss, s.tokens_to_target,
             s.time_to_target_s, s.straggler_rank, s.straggler_persistence, s.straggler_share, s.straggler_spread_s,
             s.straggler_marked ? std::optional<int64_t>(*s.straggler_marked ? 1 : 0) : std::nullopt, s.wall_s,
             s.goodput, s.peak_flops, s.peak_flops_source, s.mfu_by_dtype, s.useful_mfu, s.steady_tokens);
  q.run();
}

}  // namespace ctitan::results_detail

namespace ctitan {

using results_detail::Statement;

IngestReport ResultsDb::ingest_run_dir(int64_t run_id, const std::string& run_dir) {
  results_detail::RunDirContents c = results_detail::read_run_dir(run_dir);
  results_detail::WriteTransaction tx(db_, path_);
  {
    Statement exists(db_, path_, "SELECT 1 FROM runs WHERE id = ?1");
    exists.bind_all(run_id);
    if (!exists.step()) throw InputError("run " + std::to_string(run_id) + " is not in " + path_ +
                                         "; insert the run before ingesting its directory");
  }
  for (const char* sql : {"DELETE FROM steps WHERE run_id = ?1", "DELETE FROM summaries WHERE run_id = ?1",
                          "DELETE FROM env WHERE run_id = ?1", "DELETE FROM artifacts WHERE run_id = ?1",
                          "DELETE FROM comm_dims WHERE run_id = ?1", "DELETE FROM validation WHERE run_id = ?1",
                          "DELETE FROM goodput WHERE run_id = ?1", "DELETE FROM rank_steps WHERE run_id = ?1"}) {
    Statement del(db_, path_, sql);
    del.bind_all(run_id).run();
  }

  // A resumed run appends to metrics.jsonl, repeating steps after its
  // checkpoint: the later line (the run that went on) replaces the earlier.
  Statement step(db_, path_,
                 "INSERT OR REPLACE INTO steps(run_id, rank, step, loss, grad_norm, tps, tflops, mfu, step_time_s, "
                 "data_time_s, mem_peak_bytes, moe_load_cv, moe_load_min, moe_load_max, moe_ep_imbalance) "
                 "VALUES (?1, 0, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)");
  for (const nlohmann::json& j : c.steps) {
    step.bind_all(run_id, *results_detail::integer(j, "step"), results_detail::number(j, "loss"),
                  results_detail::number(j, "grad_norm"), results_detail::number(j, "tps"),
                  results_detail::number(j, "tflops"), results_detail::number(j, "mfu"),
                  results_detail::number(j, "step_time_s"), results_detail::number(j, "data_time_s"),
                  results_detail::integer(j, "mem_peak_bytes"), results_detail::number(j, "moe_load_cv"),
                  results_detail::number(j, "moe_load_min"), results_detail::number(j, "moe_load_max"),
                  results_detail::number(j, "moe_ep_imbalance"));
    step.run();
    step.reset();
  }
  Statement val(db_, path_,
                "INSERT OR REPLACE INTO validation(run_id, step, loss, perplexity, tokens, time_s, tps, mem_peak_bytes, "
                "train_tokens, elapsed_s) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
  for (const nlohmann::json& j : c.validation) {
    val.bind_all(run_id, *results_detail::integer(j, "step"), results_detail::number(j, "validation_loss"),
                 results_detail::number(j, "validation_perplexity"), results_detail::integer(j, "validation_tokens"),
                 results_detail::number(j, "validation_time_s"), results_detail::number(j, "validation_tps"),
                 results_detail::integer(j, "validation_mem_peak_bytes"), results_detail::integer(j, "train_tokens"),
                 results_detail::number(j, "elapsed_s"));
    val.run();
    val.reset();
  }
  if (c.summary) {
    c.summary->run_id = run_id;
    results_detail::write_summary(db_, path_, *c.summary);
  }
  Statement dims(db_, path_,
                 "INSERT OR REPLACE INTO comm_dims(run_id, mesh_dim, comm_s, exposed_comm_s) VALUES (?1, ?2, ?3, ?4)");
  for (const auto& [dim, comm, exposed] : c.comm_dims) {
    dims.bind_all(run_id, dim, comm, exposed).run();
    dims.reset();
  }
  Statement part(db_, path_, "INSERT OR REPLACE INTO goodput(run_id, part, seconds) VALUES (?1, ?2, ?3)");
  for (const auto& [name, seconds] : c.goodput) {
    part.bind_all(run_id, name, seconds).run();
    part.reset();
  }
  Statement rank_step(db_, path_,
                      "INSERT OR REPLACE INTO rank_steps(run_id, step, rank, busy_s, data_s, exposed_comm_s) "
                      "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  for (const RankStepRow& r : c.rank_steps) {
    rank_step.bind_all(run_id, r.step, static_cast<int64_t>(r.rank), r.busy_s, r.data_s, r.exposed_comm_s).run();
    rank_step.reset();
  }
  Statement env(db_, path_, "INSERT OR REPLACE INTO env(run_id, key, value) VALUES (?1, ?2, ?3)");
  for (const auto& [key, value] : c.env) {
    env.bind_all(run_id, key, value).run();
    env.reset();
  }
  Statement art(db_, path_, "INSERT OR REPLACE INTO artifacts(run_id, kind, path) VALUES (?1, ?2, ?3)");
  for (const ArtifactRow& a : c.artifacts) {
    art.bind_all(run_id, a.kind, a.path).run();
    art.reset();
  }
  Statement count(db_, path_, "SELECT count(*) FROM steps WHERE run_id = ?1");
  count.bind_all(run_id).step();
  c.report.steps = count.int64(0);
  Statement vcount(db_, path_, "SELECT count(*) FROM validation WHERE run_id = ?1");
  vcount.bind_all(run_id).step();
  c.report.validations = vcount.int64(0);
  c.report.artifacts = static_cast<int64_t>(c.artifacts.size());
  tx.commit();
  return c.report;
}

}  // namespace ctitan
