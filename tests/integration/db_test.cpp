// The results database fed by the real `ctitan train` and read by the real
// `ctitan db`: a run directory's numbers arrive unchanged (step rows equal
// metrics.jsonl, the summary equals summary.json), a crashed run's directory
// is stored as partial, and bad input to `ctitan db` is one line, exit 2.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "results/results_db.h"
#include "tests/integration/process.h"

namespace fs = std::filesystem;
using ctitan::IngestReport;
using ctitan::ResultsDb;
using ctitan::RunRow;
using ctitan::testing::BadInputCase;
using ctitan::testing::expect_one_line_exit2;
using ctitan::testing::fresh_dir;
using ctitan::testing::read_json;
using ctitan::testing::read_jsonl;
using ctitan::testing::run_ctitan;

namespace {

// Table output with every run of spaces folded to one, so a check does not
// depend on column widths.
std::string squeeze(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != ' ' || out.empty() || out.back() != ' ') out.push_back(c);
  return out;
}

// One 6-step tiny run shared by the tests below (it takes a few seconds).
class Db : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_dir_ = new fs::path(fresh_dir("db_run") / "run");
    auto r = run_ctitan({"train", "--model.flavor", "tiny", "--training.seq_len", "32", "--training.local_batch_size",
                         "4", "--training.steps", "6", "--metrics.log_freq", "1", "--metrics.peak_tflops", "1",
                         "--checkpoint.enable", "--checkpoint.interval", "3", "--job.dump_folder", run_dir_->string()});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  static void TearDownTestSuite() {
    delete run_dir_;
    run_dir_ = nullptr;
  }
  static const fs::path& run_dir() { return *run_dir_; }

  static RunRow run_row(const std::string& label) {
    RunRow r;
    r.label = label;
    r.status = "ok";
    r.exit_code = 0;
    r.world_size = 1;
    r.run_dir = run_dir().string();
    r.host = "localhost";
    std::ifstream config(run_dir() / "config.toml");
    r.config_toml.assign(std::istreambuf_iterator<char>(config), {});
    return r;
  }

 private:
  static fs::path* run_dir_;
};
fs::path* Db::run_dir_ = nullptr;

}  // namespace

TEST_F(Db, IngestOfARealRunMatchesItsFiles) {
  const auto d = fresh_dir("db_ingest");
  ResultsDb db((d / "results.db").string());
  const int64_t id = db.insert_run(run_row("tiny"));
  const IngestReport rep = db.ingest_run_dir(id, run_dir().string());
  EXPECT_FALSE(rep.partial) << (rep.notes.empty() ? "" : rep.notes.front());
  EXPECT_EQ(rep.steps, 6);
  EXPECT_EQ(rep.summary_status, "ok");

  const auto lines = read_jsonl(run_dir() / "metrics.jsonl");
  const auto steps = db.steps(id);
  ASSERT_EQ(lines.size(), 6u);
  ASSERT_EQ(steps.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(steps[i]["rank"], 0);
    EXPECT_EQ(steps[i]["step"], lines[i]["step"]);
    // Doubles survive JSON → SQLite REAL → JSON bit for bit.
    for (const char* k : {"loss", "grad_norm", "tps", "tflops", "mfu", "step_time_s", "data_time_s", "mem_peak_bytes"})
      EXPECT_EQ(steps[i][k], lines[i][k]) << k << " at step " << i + 1;
    EXPECT_TRUE(steps[i]["moe_load_cv"].is_null()) << "a dense model has no expert load";
  }

  const auto summary_json = read_json(run_dir() / "summary.json");
  const auto s = db.summary(id);
  ASSERT_TRUE(s);
  EXPECT_EQ(*s->tps_median, summary_json["tps_median"].get<double>());
  EXPECT_EQ(*s->tps_p10, summary_json["tps_p10"].get<double>());
  EXPECT_EQ(*s->tps_p90, summary_json["tps_p90"].get<double>());
  EXPECT_EQ(*s->tflops, summary_json["tflops"].get<double>());
  EXPECT_EQ(*s->mfu, summary_json["mfu"].get<double>());
  EXPECT_EQ(*s->loss_final, summary_json["loss_final"].get<double>());
  EXPECT_EQ(*s->mem_peak_bytes, summary_json["mem_peak_bytes"].get<int64_t>());
  EXPECT_FALSE(s->comm_s);  // one rank: no data parallelism, no communication keys
  EXPECT_FALSE(s->compute_s);

  // env.json's nested objects (machine_probe) are rows "machine_probe.cores" etc.
  const nlohmann::json env_file = read_json(run_dir() / "env.json");
  nlohmann::json env_json = nlohmann::json::object();
  for (auto it = env_file.begin(); it != env_file.end(); ++it) {
    if (!it->is_object()) {
      env_json[it.key()] = *it;
      continue;
    }
    for (auto in = it->begin(); in != it->end(); ++in) env_json[it.key() + "." + in.key()] = *in;
  }
  const auto env = db.env(id);
  EXPECT_EQ(env.size(), env_json.size());
  for (const auto& [k, v] : env) {
    if (env_json[k].is_string()) {
      EXPECT_EQ(v, env_json[k].get<std::string>()) << k;
    } else {
      EXPECT_EQ(v, env_json[k].dump()) << k;
    }
  }

  std::map<std::string, int> kinds;
  for (const auto& a : db.artifacts(id)) {
    ++kinds[a.kind];
    EXPECT_TRUE(fs::exists(a.path)) << a.path;
  }
  EXPECT_EQ(kinds["config"], 1);
  EXPECT_EQ(kinds["metrics"], 1);
  EXPECT_EQ(kinds["summary"], 1);
  EXPECT_EQ(kinds["env"], 1);
  EXPECT_GE(kinds["checkpoint"], 1);  // step-3 and/or step-6, as the keep policy left them
}

// An MoE run (qwen3 tiny_moe): each logged step's expert load is in
// metrics.jsonl and reaches SQLite's steps table unchanged; a dense run's
// rows have none (NULL).
TEST(DbMoe, ExpertLoadOfAnMoeRunIsStoredPerStep) {
  const auto d = fresh_dir("db_moe");
  auto r = run_ctitan({"train", "--model.name", "qwen3", "--model.flavor", "tiny_moe", "--training.seq_len", "32",
                       "--training.local_batch_size", "2", "--training.steps", "3", "--metrics.log_freq", "1",
                       "--metrics.peak_tflops", "1", "--job.dump_folder", (d / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ctitan: qwen3 tiny_moe, "), std::string::npos) << r.out;
  const auto lines = read_jsonl(d / "run" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  for (const auto& l : lines) {
    ASSERT_TRUE(l.contains("moe_load_cv")) << l.dump();
    // 2 x 32 tokens, top 2 of 4 experts: 128 routed rows per layer.
    EXPECT_LE(l["moe_load_max"].get<double>(), 128.0);
    EXPECT_LE(l["moe_load_min"].get<double>(), 32.0) << "an even split is 32 each; the fewest cannot exceed it";
    EXPECT_GE(l["moe_load_cv"].get<double>(), 0.0);
  }
  ResultsDb db((d / "results.db").string());
  RunRow row;
  row.label = "moe";
  row.status = "ok";
  row.world_size = 1;
  row.run_dir = (d / "run").string();
  row.host = "localhost";
  const int64_t id = db.insert_run(row);
  db.ingest_run_dir(id, row.run_dir);
  const auto steps = db.steps(id);
  ASSERT_EQ(steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    for (const char* k : {"moe_load_cv", "moe_load_min", "moe_load_max"}) EXPECT_EQ(steps[i][k], lines[i][k]) << k;
}

// Expert parallelism's token imbalance (the busiest rank's routed rows over
// the ep group's mean) per logged step and as the run's mean, in
// metrics.jsonl, summary.json and SQLite alike. With
// moe_force_load_balance every expert gets the same rows: exactly 1. With
// learned routing at least 1.
TEST(DbMoe, ExpertParallelImbalanceIsStored) {
  const auto d = fresh_dir("db_moe_ep");
  for (const bool forced : {true, false}) {
    const fs::path run = d / (forced ? "forced" : "learned");
    auto r = run_ctitan({"train", "--nproc", "2", "--model.name", "qwen3", "--model.flavor", "tiny_moe",
                         "--training.seq_len", "32", "--training.local_batch_size", "2", "--training.steps", "4",
                         "--metrics.log_freq", "1", "--metrics.warmup_steps", "1",
                         "--parallelism.data_parallel_shard_degree", "2", "--parallelism.expert_parallel_degree", "2",
                         "--debug.moe_force_load_balance", forced ? "true" : "false", "--job.dump_folder",
                         run.string()});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("EP 2"), std::string::npos) << r.out;
    const auto lines = read_jsonl(run / "metrics.jsonl");
    ASSERT_EQ(lines.size(), 4u);
    for (const auto& l : lines) {
      ASSERT_TRUE(l.contains("moe_ep_imbalance")) << l.dump();
      if (forced) {
        EXPECT_EQ(l["moe_ep_imbalance"].get<double>(), 1.0) << l.dump();
      } else {
        EXPECT_GE(l["moe_ep_imbalance"].get<double>(), 1.0) << l.dump();
      }
    }
    const auto summary = read_json(run / "summary.json");
    double mean = 0;
    for (size_t i = 1; i < lines.size(); ++i) mean += lines[i]["moe_ep_imbalance"].get<double>() / 3.0;
    EXPECT_NEAR(summary.at("moe_ep_imbalance").get<double>(), mean, 1e-12);
    ResultsDb db((d / "results.db").string());
    RunRow row;
    row.label = forced ? "forced" : "learned";
    row.status = "ok";
    row.world_size = 2;
    row.run_dir = run.string();
    row.host = "localhost";
    const int64_t id = db.insert_run(row);
    db.ingest_run_dir(id, row.run_dir);
    const auto steps = db.steps(id);
    ASSERT_EQ(steps.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(steps[i]["moe_ep_imbalance"], lines[i]["moe_ep_imbalance"]);
    ASSERT_TRUE(db.summary(id) && db.summary(id)->moe_ep_imbalance);
    EXPECT_EQ(*db.summary(id)->moe_ep_imbalance, summary.at("moe_ep_imbalance").get<double>());
  }
}

TEST_F(Db, IngestOfACrashedRunIsPartial) {
  const auto d = fresh_dir("db_crashed");
  const fs::path crashed = d / "run";
  fs::copy(run_dir(), crashed, fs::copy_options::recursive);
  fs::remove(crashed / "summary.json");
  const auto size = fs::file_size(crashed / "metrics.jsonl");
  fs::resize_file(crashed / "metrics.jsonl", size - 40);  // cut the 6th line mid-write

  ResultsDb db((d / "results.db").string());
  RunRow row = run_row("crashed");
  row.status = "failed";
  row.exit_code = 137;
  const int64_t id = db.insert_run(row);
  const IngestReport rep = db.ingest_run_dir(id, crashed.string());
  EXPECT_TRUE(rep.partial);
  EXPECT_EQ(rep.steps, 5);
  ASSERT_EQ(rep.notes.size(), 2u);
  EXPECT_NE(rep.notes[0].find("line 6 is cut short"), std::string::npos) << rep.notes[0];
  EXPECT_NE(rep.notes[1].find("summary.json is missing"), std::string::npos) << rep.notes[1];
  EXPECT_FALSE(db.summary(id));

  auto show = run_ctitan({"db", "show", std::to_string(id), "--db", (d / "results.db").string()});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const std::string out = squeeze(show.out);
  EXPECT_NE(out.find("status failed"), std::string::npos) << show.out;
  EXPECT_NE(out.find("exit_code 137"), std::string::npos) << show.out;
  EXPECT_NE(out.find("summary\n none"), std::string::npos) << show.out;
  EXPECT_NE(out.find("steps (5 of 5 rows)"), std::string::npos) << show.out;
}

TEST_F(Db, LsAndShowPrintTheRuns) {
  const auto d = fresh_dir("db_ls");
  const std::string db_file = (d / "results.db").string();
  int64_t a = 0, b = 0, lone = 0;
  {
    ResultsDb db(db_file);
    RunRow r = run_row("compile.enable=true");
    r.sweep_id = db.upsert_sweep("alpha", "");
    r.world_size = 2;
    r.repeat = 1;
    ctitan::PredictionRow predicted;  // what a sweep stores with its runs (schema v6)
    predicted.hardware = "cpu";
    predicted.calibration = "uncalibrated: test";
    predicted.tps = 1234.5;
    predicted.mem_peak_bytes = 3 << 20;
    a = db.insert_run(r, predicted);
    db.ingest_run_dir(a, run_dir().string());
    RunRow other = run_row("float8=tensorwise");
    other.sweep_id = db.upsert_sweep("beta", "");
    other.status = "oom";
    b = db.insert_run(other);
    lone = db.insert_run(run_row("by hand"));
  }
  const auto summary_json = read_json(run_dir() / "summary.json");

  auto ls = run_ctitan({"db", "ls", "--db", db_file});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_EQ(ls.err, "");
  const std::string table = squeeze(ls.out);
  EXPECT_NE(table.find("id sweep label world repeat status tps_median mfu_% mem_peak loss_final\n"), std::string::npos)
      << ls.out;
  char loss[32];
  std::snprintf(loss, sizeof(loss), "%.4f", summary_json["loss_final"].get<double>());
  EXPECT_NE(table.find(std::to_string(a) + " alpha compile.enable=true 2 1 ok "), std::string::npos) << ls.out;
  EXPECT_NE(table.find(std::string(loss) + "\n"), std::string::npos) << ls.out;
  EXPECT_NE(table.find(std::to_string(b) + " beta float8=tensorwise 1 0 oom - - - -\n"), std::string::npos) << ls.out;
  EXPECT_NE(table.find(std::to_string(lone) + " - by hand 1 0 ok - - - -\n"), std::string::npos) << ls.out;
  EXPECT_NE(table.find("3 runs in " + db_file), std::string::npos) << ls.out;

  auto only_beta = run_ctitan({"db", "ls", "--db", db_file, "--sweep", "beta"});
  ASSERT_EQ(only_beta.exit_code, 0) << only_beta.err;
  EXPECT_EQ(only_beta.out.find("alpha"), std::string::npos) << only_beta.out;
  EXPECT_NE(only_beta.out.find("1 run in " + db_file + " (sweep beta)"), std::string::npos) << only_beta.out;

  auto show = run_ctitan({"db", "show", std::to_string(a), "--db", db_file, "--config"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const std::string shown = squeeze(show.out);
  for (const std::string& want :
       {"run " + std::to_string(a) + "\n", std::string(" sweep alpha\n"), std::string(" label compile.enable=true\n"),
        std::string(" world_size 2\n"), std::string(" tps_median (tokens/s/device) "), std::string(" libtorch_version = "),
        " metrics " + fs::absolute(run_dir() / "metrics.jsonl").string() + "\n", std::string("steps (6 of 6 rows)\n"),
        std::string("config.toml\n# ctitan resolved config")})
    EXPECT_NE(shown.find(want), std::string::npos) << want << "\n" << show.out;

  EXPECT_NE(shown.find("prediction (cpu; uncalibrated: test)\n tps (tokens/s/device) 1234.5\n step_time_s -\n"),
            std::string::npos)
      << show.out;
  EXPECT_NE(shown.find(" mem_peak_bytes (per rank) 3145728 (3.0 MiB)\n"), std::string::npos) << show.out;

  auto show_lone = run_ctitan({"db", "show", std::to_string(lone), "--db", db_file});
  ASSERT_EQ(show_lone.exit_code, 0) << show_lone.err;
  EXPECT_NE(show_lone.out.find("steps (0 of 0 rows)"), std::string::npos) << show_lone.out;
  EXPECT_EQ(show_lone.out.find("prediction ("), std::string::npos) << show_lone.out;  // a run without one

  auto help = run_ctitan({"db", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("ls"), std::string::npos);
  EXPECT_NE(help.out.find("show"), std::string::npos);
}

// {dir} in an argument is a folder holding recipe.toml and results.db (one
// sweep, no runs), made fresh for each case.
class DbBadInput : public ::testing::TestWithParam<BadInputCase> {};

TEST_P(DbBadInput, IsOneLineAndExit2) {
  const auto dir = fresh_dir("db_bad_" + GetParam().name);
  std::ofstream(dir / "recipe.toml") << "[training]\nsteps = 10\n";
  ResultsDb((dir / "results.db").string()).upsert_sweep("only", "");
  std::vector<std::string> args = GetParam().args;
  for (std::string& a : args)
    if (a.rfind("{dir}", 0) == 0) a = dir.string() + a.substr(5);
  const auto r = run_ctitan(args);
  expect_one_line_exit2(r, GetParam().expect_in_message);
  EXPECT_FALSE(fs::exists(dir / "nope.db"));  // reported, never created
  std::ifstream toml(dir / "recipe.toml");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(toml), {}), "[training]\nsteps = 10\n");  // untouched
}

INSTANTIATE_TEST_SUITE_P(
    Db, DbBadInput,
    ::testing::Values(
        BadInputCase{"missing_file", {"db", "ls", "--db", "{dir}/nope.db"}, "nope.db does not exist"},
        BadInputCase{"missing_file_show", {"db", "show", "1", "--db", "{dir}/nope.db"}, "nope.db does not exist"},
        BadInputCase{"not_a_database", {"db", "ls", "--db", "{dir}/recipe.toml"}, "is not an SQLite database"},
        BadInputCase{"unknown_run", {"db", "show", "99", "--db", "{dir}/results.db"}, "run 99 is not in"},
        BadInputCase{"unknown_sweep", {"db", "ls", "--db", "{dir}/results.db", "--sweep", "x"},
                     "no sweep named 'x' in"},
        BadInputCase{"no_db_flag", {"db", "ls"}, "--db is required"},
        BadInputCase{"no_subcommand", {"db"}, "A subcommand is required"},
        BadInputCase{"unknown_subcommand", {"db", "rm", "--db", "{dir}/results.db"}, "unknown db command 'rm'"},
        BadInputCase{"run_id_not_a_number", {"db", "show", "abc", "--db", "{dir}/results.db"}, "run_id"}),
    [](const auto& info) { return info.param.name; });
