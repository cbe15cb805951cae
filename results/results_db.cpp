// ResultsDb: sweeps, runs, summaries, env, artifacts and hardware rows.
// Opening and migrations live in schema.cpp, run-directory ingest in
// ingest.cpp. Each public write is one WriteTransaction.
#include "results/results_db.h"

#include <algorithm>
#include <array>
#include <map>
#include <stdexcept>

#include "common/build_identity.h"
#include "common/run_timing.h"
#include "ctitan/build_info.h"
#include "results/run_dir.h"
#include "results/schema.h"
#include "results/sqlite_stmt.h"

namespace ctitan {

using results_detail::Statement;
using results_detail::WriteTransaction;

namespace {

constexpr std::array<const char*, 8> kStatuses = {"pending", "running",    "ok",       "failed",
                                                  "timeout", "oom",        "infeasible", "cancelled"};

// A status outside the documented set is a bug in the caller, not bad input.
void check_status(const std::string& status) {
  if (std::find(kStatuses.begin(), kStatuses.end(), status) == kStatuses.end())
    throw std::invalid_argument("run status '" + status +
                                "' is not one of pending, running, ok, failed, timeout, oom, infeasible, cancelled");
}

// sweep_id 0 ("no sweep") is NULL in the table, so the foreign key holds.
std::optional<int64_t> sweep_ref(int64_t sweep_id) {
  return sweep_id == 0 ? std::nullopt : std::optional<int64_t>(sweep_id);
}

constexpr const char* kRunColumns =
    "id, sweep_id, point_key, label, config_toml, config_hash, world_size, repeat, status, exit_code, error, "
    "run_dir, host, started_at, ended_at FROM runs ";

RunRow read_run(const Statement& q) {
  RunRow r;
  r.id = q.int64(0);
  r.sweep_id = q.is_null(1) ? 0 : q.int64(1);
  r.point_key = q.text(2);
  r.label = q.text(3);
  r.config_toml = q.text(4);
  r.config_hash = q.text(5);
  r.world_size = q.int64(6);
  r.repeat = q.int64(7);
  r.status = q.text(8);
  r.exit_code = q.opt_int64(9);
  r.error = q.text(10);
  r.run_dir = q.text(11);
  r.host = q.text(12);
  r.started_at = q.text(13);
  r.ended_at = q.text(14);
  return r;
}

std::vector<RunRow> read_runs(Statement& q) {
  std::vector<RunRow> out;
  while (q.step()) out.push_back(read_run(q));
  return out;
}

constexpr const char* kSweepColumns =
    "SELECT id, name, spec_toml, created_at, ctitan_version, git_sha, paired_with, spec_path FROM sweeps ";

SweepRow read_sweep(const Statement& q) {
  return {q.int64(0), q.text(1), q.text(2), q.text(3), q.text(4), q.text(5), q.text(6), q.text(7)};
}

// One statement as one write transaction; returns the rows it changed.
template <class... T>
int64_t write_one(sqlite3* db, const std::string& path, const char* sql, const T&... values) {
  WriteTransaction tx(db, path);
  Statement q(db, path, sql);
  q.bind_all(values...).run();
  const int64_t changed = sqlite3_changes(db);
  tx.commit();
  return changed;
}

}  // namespace

ResultsDb::ResultsDb(const std::string& path, Access access)
    : path_(path),
      db_(access == Access::read_only ? results_detail::open_for_reading(path) : results_detail::open_and_migrate(path)) {}

ResultsDb::~ResultsDb() { sqlite3_close(db_); }

int ResultsDb::schema_version() const { return results_detail::read_schema_version(db_, path_); }

int64_t ResultsDb::upsert_sweep(const std::string& name, const std::string& spec_toml) {
  WriteTransaction tx(db_, path_);
  Statement ins(db_, path_,
                "INSERT INTO sweeps(name, spec_toml, ctitan_version, git_sha) VALUES (?1, ?2, ?3, ?4) "
                "ON CONFLICT(name) DO NOTHING");
  ins.bind_all(name, spec_toml, CTITAN_VERSION, this_build().short_sha()).run();
  Statement id(db_, path_, "SELECT id FROM sweeps WHERE name = ?1");
  id.bind_all(name);
  id.step();
  const int64_t out = id.int64(0);
  tx.commit();
  return out;
}

SweepRow ResultsDb::open_sweep(const std::string& name, const std::string& spec_toml, const std::string& spec_path,
                               const std::function<void(const SweepRow&)>& check) {
  WriteTransaction tx(db_, path_);
  std::optional<SweepRow> before;
  {
    Statement q(db_, path_, (std::string(kSweepColumns) + "WHERE name = ?1").c_str());
    q.bind_all(name);
    if (q.step()) before = read_sweep(q);
  }
  if (before) {
    check(*before);
    Statement up(db_, path_, "UPDATE sweeps SET spec_toml = ?2, spec_path = ?3 WHERE id = ?1");
    up.bind_all(before->id, spec_toml, spec_path).run();
  } else {
    Statement ins(db_, path_,
                  "INSERT INTO sweeps(name, spec_toml, ctitan_version, git_sha, spec_path) VALUES (?1, ?2, ?3, ?4, ?5)");
    ins.bind_all(name, spec_toml, CTITAN_VERSION, this_build().short_sha(), spec_path).run();
    Statement q(db_, path_, (std::string(kSweepColumns) + "WHERE name = ?1").c_str());
    q.bind_all(name);
    q.step();
    before = read_sweep(q);
  }
  tx.commit();
  return *before;
}

std::optional<SweepRow> ResultsDb::sweep(const std::string& name) const {
  Statement q(db_, path_, (std::string(kSweepColumns) + "WHERE name = ?1").c_str());
  q.bind_all(name);
  if (!q.step()) return std::nullopt;
  return read_sweep(q);
}

std::vector<SweepRow> ResultsDb::sweeps() const {
  Statement q(db_, path_, (std::string(kSweepColumns) + "ORDER BY id").c_str());
  std::vector<SweepRow> out;
  while (q.step()) out.push_back(read_sweep(q));
  return out;
}

void ResultsDb::set_paired_with(const std::string& candidate, const std::string& baseline) {
  write_one(db_, path_, "UPDATE sweeps SET paired_with = ?2 WHERE name = ?1", candidate, baseline);
}

int64_t ResultsDb::insert_run(const RunRow& r) { return insert_run(r, std::nullopt); }

int64_t ResultsDb::insert_run(const RunRow& r, const std::optional<PredictionRow>& prediction) {
  check_status(r.status);
  WriteTransaction tx(db_, path_);
  Statement q(db_, path_,
              "INSERT INTO runs(sweep_id, point_key, label, config_toml, config_hash, world_size, repeat, status, "
              "exit_code, error, run_dir, host, started_at, ended_at) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)");
  q.bind_all(sweep_ref(r.sweep_id), r.point_key, r.label, r.config_toml, r.config_hash, r.world_size, r.repeat,
             r.status, r.exit_code, r.error, r.run_dir, r.host, r.started_at, r.ended_at)
      .run();
  const int64_t id = sqlite3_last_insert_rowid(db_);  // this connection's insert, even if another process wrote since
  if (prediction) {
    PredictionRow p = *prediction;
    p.run_id = id;
    write_prediction(p);
  }
  tx.commit();
  return id;
}

void ResultsDb::write_prediction(const PredictionRow& p) {
  Statement q(db_, path_,
              "INSERT OR REPLACE INTO predictions(run_id, hardware, calibration, step_time_s, tps, mfu, "
              "mem_peak_bytes, detail_json, plan_index, tps_prior, tps_low, tps_high, learned_from, tps_after) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)");
  q.bind_all(p.run_id, p.hardware, p.calibration, p.step_time_s, p.tps, p.mfu, p.mem_peak_bytes, p.detail_json,
             p.plan_index, p.tps_prior, p.tps_low, p.tps_high, p.learned_from, p.tps_after)
      .run();
}

void ResultsDb::put_prediction(const PredictionRow& p) {
  WriteTransaction tx(db_, path_);
  write_prediction(p);
  tx.commit();
}

std::optional<PredictionRow> ResultsDb::prediction(int64_t run_id) const {
  Statement q(db_, path_,
              "SELECT run_id, hardware, calibration, step_time_s, tps, mfu, mem_peak_bytes, detail_json, plan_index, "
              "tps_prior, tps_low, tps_high, learned_from, tps_after FROM predictions WHERE run_id = ?1");
  q.bind_all(run_id);
  if (!q.step()) return std::nullopt;
  PredictionRow p;
  p.run_id = q.int64(0);
  p.hardware = q.text(1);
  p.calibration = q.text(2);
  p.step_time_s = q.opt_real(3);
  p.tps = q.opt_real(4);
  p.mfu = q.opt_real(5);
  p.mem_peak_bytes = q.opt_int64(6);
  p.detail_json = q.text(7);
  p.plan_index = q.opt_int64(8);
  p.tps_prior = q.opt_real(9);
  p.tps_low = q.opt_real(10);
  p.tps_high = q.opt_real(11);
  p.learned_from = q.opt_int64(12);
  p.tps_after = q.opt_real(13);
  return p;
}

void ResultsDb::put_slurm_job(const SlurmJobRow& j) {
  write_one(db_, path_,
            "INSERT OR REPLACE INTO slurm_jobs(run_id, job_id, job_name, state, reason, script, submitted_at, "
            "updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            j.run_id, j.job_id, j.job_name, j.state, j.reason, j.script, j.submitted_at, j.updated_at);
}

namespace {
constexpr const char* kSlurmColumns =
    "SELECT j.run_id, j.job_id, j.job_name, j.state, j.reason, j.script, j.submitted_at, j.updated_at "
    "FROM slurm_jobs j ";
SlurmJobRow read_slurm_job(const Statement& q) {
  return {q.int64(0), q.text(1), q.text(2), q.text(3), q.text(4), q.text(5), q.text(6), q.text(7)};
}
}  // namespace

std::optional<SlurmJobRow> ResultsDb::slurm_job(int64_t run_id) const {
  Statement q(db_, path_, (std::string(kSlurmColumns) + "WHERE j.run_id = ?1").c_str());
  q.bind_all(run_id);
  if (!q.step()) return std::nullopt;
  return read_slurm_job(q);
}

std::vector<SlurmJobRow> ResultsDb::slurm_jobs(int64_t sweep_id) const {
  Statement q(db_, path_,
              (std::string(kSlurmColumns) + "JOIN runs r ON r.id = j.run_id WHERE r.sweep_id = ?1 ORDER BY j.run_id")
                  .c_str());
  q.bind_all(sweep_id);
  std::vector<SlurmJobRow> out;
  while (q.step()) out.push_back(read_slurm_job(q));
  return out;
}

void ResultsDb::update_run(const RunRow& r) {
  check_status(r.status);
  const int64_t changed =
      write_one(db_, path_,
                "UPDATE runs SET status = ?2, exit_code = ?3, error = ?4, started_at = ?5, ended_at = ?6, "
                "run_dir = ?7, host = ?8 WHERE id = ?1",
                r.id, r.status, r.exit_code, r.error, r.started_at, r.ended_at, r.run_dir, r.host);
  if (changed == 0) throw std::invalid_argument("update_run: run " + std::to_string(r.id) + " is not in " + path_);
}

std::optional<RunRow> ResultsDb::run(int64_t id) const {
  Statement q(db_, path_, (std::string("SELECT ") + kRunColumns + "WHERE id = ?1").c_str());
  q.bind_all(id);
  if (!q.step()) return std::nullopt;
  return read_run(q);
}

std::vector<RunRow> ResultsDb::runs(int64_t sweep_id) const {
  if (sweep_id < 0) {
    Statement q(db_, path_, (std::string("SELECT ") + kRunColumns + "ORDER BY id").c_str());
    return read_runs(q);
  }
  Statement q(db_, path_, (std::string("SELECT ") + kRunColumns + "WHERE sweep_id IS ?1 ORDER BY id").c_str());
  q.bind_all(sweep_ref(sweep_id));
  return read_runs(q);
}

std::vector<RunRow> ResultsDb::runs_of_point(const std::string& point_key, const std::string& status) const {
  Statement q(db_, path_,
              (std::string("SELECT ") + kRunColumns + "WHERE point_key = ?1 AND (?2 = '' OR status = ?2) ORDER BY id DESC")
                  .c_str());
  q.bind_all(point_key, status);
  return read_runs(q);
}

void ResultsDb::put_summary(const SummaryRow& s) {
  WriteTransaction tx(db_, path_);
  results_detail::write_summary(db_, path_, s);
  tx.commit();
}

std::optional<SummaryRow> ResultsDb::summary(int64_t run_id) const {
  Statement q(db_, path_,
              "SELECT run_id, tps_median, tps_p10, tps_p90, tflops, mfu, mem_peak_bytes, loss_final, compute_s, "
              "comm_s, exposed_comm_s, idle_s, pipeline_bubble, pipeline_bubble_theory, moe_ep_imbalance, seed, "
              "validation_loss_final, target_loss, tokens_to_target, time_to_target_s, straggler_rank, "
              "straggler_persistence, straggler_share, straggler_spread_s, straggler_marked, wall_s, goodput, peak_flops, "
              "peak_flops_source, mfu_by_dtype, useful_mfu, steady_tokens FROM summaries WHERE run_id = ?1");
  q.bind_all(run_id);
  if (!q.step()) return std::nullopt;
  SummaryRow s;
  s.run_id = q.int64(0);
  s.tps_median = q.opt_real(1);
  s.tps_p10 = q.opt_real(2);
  s.tps_p90 = q.opt_real(3);
  s.tflops = q.opt_real(4);
  s.mfu = q.opt_real(5);
  s.mem_peak_bytes = q.opt_int64(6);
  s.loss_final = q.opt_real(7);
  s.compute_s = q.opt_real(8);
  s.comm_s = q.opt_real(9);
  s.exposed_comm_s = q.opt_real(10);
  s.idle_s = q.opt_real(11);
  s.pipeline_bubble = q.opt_real(12);
  s.pipeline_bubble_theory = q.opt_real(13);
  s.moe_ep_imbalance = q.opt_real(14);
  s.seed = q.opt_int64(15);
  s.validation_loss_final = q.opt_real(16);
  s.target_loss = q.opt_real(17);
  s.tokens_to_target = q.opt_real(18);
  s.time_to_target_s = q.opt_real(19);
  s.straggler_rank = q.opt_int64(20);
  s.straggler_persistence = q.opt_real(21);
  s.straggler_share = q.opt_real(22);
  s.straggler_spread_s = q.opt_real(23);
  if (const auto marked = q.opt_int64(24)) s.straggler_marked = *marked != 0;
  s.wall_s = q.opt_real(25);
  s.goodput = q.opt_real(26);
  s.peak_flops = q.opt_real(27);
  if (!q.is_null(28)) s.peak_flops_source = q.text(28);
  s.mfu_by_dtype = q.opt_real(29);
  s.useful_mfu = q.opt_real(30);
  s.steady_tokens = q.opt_int64(31);
  return s;
}

std::vector<std::pair<std::string, double>> ResultsDb::goodput(int64_t run_id) const {
  Statement q(db_, path_, "SELECT part, seconds FROM goodput WHERE run_id = ?1 AND seconds IS NOT NULL");
  q.bind_all(run_id);
  std::map<std::string, double> stored;
  while (q.step()) stored[q.text(0)] = q.real(1);
  std::vector<std::pair<std::string, double>> out;
  for (const std::string& part : goodput_part_names())
    if (auto it = stored.find(part); it != stored.end()) out.emplace_back(part, it->second);
  return out;
}

std::vector<RankStepRow> ResultsDb::rank_steps(int64_t run_id) const {
  Statement q(db_, path_,
              "SELECT step, rank, busy_s, data_s, exposed_comm_s FROM rank_steps WHERE run_id = ?1 ORDER BY step, rank");
  q.bind_all(run_id);
  std::vector<RankStepRow> out;
  while (q.step())
    out.push_back({q.int64(0), static_cast<int>(q.int64(1)), q.opt_real(2), q.opt_real(3), q.opt_real(4)});
  return out;
}

std::vector<nlohmann::json> ResultsDb::steps(int64_t run_id) const {
  static constexpr std::array<const char*, 14> kCols = {
      "rank",        "step",        "loss",           "grad_norm",   "tps",          "tflops",      "mfu",
      "step_time_s", "data_time_s", "mem_peak_bytes", "moe_load_cv", "moe_load_min", "moe_load_max",
      "moe_ep_imbalance"};
  Statement q(db_, path_,
              "SELECT rank, step, loss, grad_norm, tps, tflops, mfu, step_time_s, data_time_s, mem_peak_bytes, "
              "moe_load_cv, moe_load_min, moe_load_max, moe_ep_imbalance FROM steps WHERE run_id = ?1 ORDER BY rank, step");
  q.bind_all(run_id);
  std::vector<nlohmann::json> out;
  while (q.step()) {
    nlohmann::json row = {{"run_id", run_id}};
    for (int c = 0; c < static_cast<int>(kCols.size()); ++c) {
      const bool integer = c < 2 || c == 9;
      if (q.is_null(c)) {
        row[kCols[c]] = nullptr;
      } else if (integer) {
        row[kCols[c]] = q.int64(c);
      } else {
        row[kCols[c]] = q.real(c);
      }
    }
    out.push_back(std::move(row));
  }
  return out;
}

std::vector<nlohmann::json> ResultsDb::validation(int64_t run_id) const {
  Statement q(db_, path_,
              "SELECT step, loss, perplexity, tokens, time_s, tps, mem_peak_bytes, train_tokens, elapsed_s FROM validation "
              "WHERE run_id = ?1 ORDER BY step");
  q.bind_all(run_id);
  std::vector<nlohmann::json> out;
  while (q.step()) {
    const auto real = [&q](int c) { return q.is_null(c) ? nlohmann::json(nullptr) : nlohmann::json(q.real(c)); };
    const auto integer = [&q](int c) { return q.is_null(c) ? nlohmann::json(nullptr) : nlohmann::json(q.int64(c)); };
    out.push_back({{"run_id", run_id}, {"step", q.int64(0)}, {"loss", real(1)}, {"perplexity", real(2)},
                   {"tokens", integer(3)}, {"time_s", real(4)}, {"tps", real(5)}, {"mem_peak_bytes", integer(6)},
                   {"train_tokens", integer(7)}, {"elapsed_s", real(8)}});
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> ResultsDb::env(int64_t run_id) const {
  Statement q(db_, path_, "SELECT key, value FROM env WHERE run_id = ?1 ORDER BY key");
  q.bind_all(run_id);
  std::vector<std::pair<std::string, std::string>> out;
  while (q.step()) out.emplace_back(q.text(0), q.text(1));
  return out;
}

std::vector<ArtifactRow> ResultsDb::artifacts(int64_t run_id) const {
  Statement q(db_, path_, "SELECT kind, path FROM artifacts WHERE run_id = ?1 ORDER BY path");
  q.bind_all(run_id);
  std::vector<ArtifactRow> out;
  while (q.step()) out.push_back({q.text(0), q.text(1)});
  return out;
}

void ResultsDb::put_hardware(const std::string& host_fingerprint, const std::string& dtype, double peak_flops) {
  write_one(db_, path_,
            "INSERT INTO hardware(host_fingerprint, dtype, peak_flops) VALUES (?1, ?2, ?3) "
            "ON CONFLICT(host_fingerprint, dtype) DO UPDATE SET peak_flops = excluded.peak_flops, "
            "measured_at = strftime('%Y-%m-%dT%H:%M:%SZ', 'now')",
            host_fingerprint, dtype, peak_flops);
}

std::optional<double> ResultsDb::hardware_peak(const std::string& host_fingerprint, const std::string& dtype) const {
  Statement q(db_, path_, "SELECT peak_flops FROM hardware WHERE host_fingerprint = ?1 AND dtype = ?2");
  q.bind_all(host_fingerprint, dtype);
  if (!q.step()) return std::nullopt;
  return q.real(0);
}

}  // namespace ctitan
