#include "harness/db_command.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>

#include "common/errors.h"
#include "harness/cli.h"
#include "results/results_db.h"

namespace ctitan {
namespace {

// A plain-text table: columns padded to their widest cell, numbers right-aligned.
struct TextTable {
  std::vector<std::string> header;
  std::vector<bool> right;  // per column
  std::vector<std::vector<std::string>> rows;
  bool print_header = true;

  void print(std::ostream& out, const std::string& indent = "") const {
    std::vector<size_t> width(header.size());
    for (size_t c = 0; c < header.size(); ++c) {
      width[c] = header[c].size();
      for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
    }
    auto line = [&](const std::vector<std::string>& cells) {
      std::string s = indent;
      for (size_t c = 0; c < cells.size(); ++c) {
        const std::string pad(width[c] - cells[c].size(), ' ');
        s += right[c] ? pad + cells[c] : cells[c] + (c + 1 < cells.size() ? pad : "");
        if (c + 1 < cells.size()) s += "  ";
      }
      out << s << "\n";
    };
    if (print_header) line(header);
    for (const auto& r : rows) line(r);
  }
};

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

std::string or_dash(const std::optional<double>& v, const char* format) { return v ? fmt(format, *v) : "-"; }

std::string bytes(const std::optional<int64_t>& b) {
  if (!b) return "-";
  const double mib = static_cast<double>(*b) / (1024.0 * 1024.0);
  return mib >= 1024.0 ? fmt("%.2f GiB", mib / 1024.0) : fmt("%.1f MiB", mib);
}

std::string text_or_dash(const std::string& s) { return s.empty() ? "-" : s; }

// `ctitan db` only reads: a path that does not exist is reported, not created.
void require_existing(const std::string& db_path) {
  if (!std::filesystem::exists(db_path))
    throw InputError("results database " + db_path + " does not exist; pass the --db file a sweep wrote");
}

void list_runs(const std::string& db_path, const std::string& sweep_name) {
  require_existing(db_path);
  ResultsDb db(db_path, ResultsDb::Access::read_only);
  std::map<int64_t, std::string> sweep_names;
  for (const SweepRow& s : db.sweeps()) sweep_names[s.id] = s.name;
  std::vector<RunRow> runs;
  if (sweep_name.empty()) {
    runs = db.runs();
  } else {
    const auto s = db.sweep(sweep_name);
    if (!s) {
      std::string known;
      for (const auto& [id, name] : sweep_names) known += (known.empty() ? "" : ", ") + name;
      throw InputError("no sweep named '" + sweep_name + "' in " + db_path +
                       (known.empty() ? " (it has no sweeps)" : " (sweeps: " + known + ")"));
    }
    runs = db.runs(s->id);
  }
  TextTable t{{"id", "sweep", "label", "world", "repeat", "status", "tps_median", "mfu_%", "mem_peak", "loss_final"},
              {true, false, false, true, true, false, true, true, true, true},
              {}};
  for (const RunRow& r : runs) {
    const auto s = db.summary(r.id);
    const SummaryRow sum = s.value_or(SummaryRow{});
    t.rows.push_back({std::to_string(r.id), r.sweep_id ? sweep_names[r.sweep_id] : "-", text_or_dash(r.label),
                      std::to_string(r.world_size), std::to_string(r.repeat), r.status,
                      or_dash(sum.tps_median, "%.0f"), or_dash(sum.mfu, "%.2f"), bytes(sum.mem_peak_bytes),
                      or_dash(sum.loss_final, "%.4f")});
  }
  t.print(std::cout);
  std::cout << runs.size() << (runs.size() == 1 ? " run" : " runs") << " in " << db_path
            << (sweep_name.empty() ? "" : " (sweep " + sweep_name + ")") << "\n";
}

// Up to ~16 rows: the first, the last and evenly spaced ones between.
std::vector<size_t> sample_rows(size_t n) {
  constexpr size_t kMax = 16;
  std::vector<size_t> idx;
  for (size_t i = 0; i < n; ++i)
    if (n <= kMax || i == n - 1 || i % ((n + kMax - 2) / (kMax - 1)) == 0) idx.push_back(i);
  return idx;
}

// A number column: `format` applied, "-" for NULL.
std::string num(const nlohmann::json& v, const char* format) {
  return v.is_number() ? fmt(format, v.get<double>()) : std::string("-");
}

void show_run(const std::string& db_path, int64_t run_id, bool with_config) {
  require_existing(db_path);
  ResultsDb db(db_path, ResultsDb::Access::read_only);
  const auto run = db.run(run_id);
  if (!run) {
    const auto all = db.runs();
    throw InputError("run " + std::to_string(run_id) + " is not in " + db_path +
                     (all.empty() ? " (it has no runs)"
                                  : " (run ids " + std::to_string(all.front().id) + ".." +
                                        std::to_string(all.back().id) + "; `ctitan db ls --db " + db_path +
                                        "` lists them)"));
  }
  const RunRow& r = *run;
  std::string sweep = "-";
  for (const SweepRow& s : db.sweeps())
    if (s.id == r.sweep_id) sweep = s.name;
  std::cout << "run " << r.id << "\n";
  TextTable row{{"", ""}, {false, false}, {}, false};
  auto add = [&row](const std::string& k, const std::string& v) { row.rows.push_back({k, text_or_dash(v)}); };
  add("sweep", sweep);
  add("label", r.label);
  add("status", r.status);
  add("exit_code", r.exit_code ? std::to_string(*r.exit_code) : "");
  add("error", r.error);
  add("world_size", std::to_string(r.world_size));
  add("repeat", std::to_string(r.repeat));
  add("point_key", r.point_key);
  add("config_hash", r.config_hash);
  add("run_dir", r.run_dir);
  add("host", r.host);
  add("started_at", r.started_at);
  add("ended_at", r.ended_at);
  row.print(std::cout, "  ");

  std::cout << "\nsummary\n";
  if (const auto s = db.summary(r.id)) {
    TextTable t{{"", ""}, {false, true}, {}, false};
    auto put = [&t](const char* k, const std::string& v) { t.rows.push_back({k, v}); };
    put("tps_median (tokens/s/device)", or_dash(s->tps_median, "%.1f"));
    put("tps_p10", or_dash(s->tps_p10, "%.1f"));
    put("tps_p90", or_dash(s->tps_p90, "%.1f"));
    put("tflops (per device)", or_dash(s->tflops, "%.4f"));
    put("mfu (%)", or_dash(s->mfu, "%.3f"));
    put("mem_peak_bytes", s->mem_peak_bytes ? std::to_string(*s->mem_peak_bytes) + " (" + bytes(s->mem_peak_bytes) + ")" : "-");
    put("loss_final", or_dash(s->loss_final, "%.4f"));
    put("compute_s (per step)", or_dash(s->compute_s, "%.4f"));
    put("comm_s (per step)", or_dash(s->comm_s, "%.4f"));
    put("exposed_comm_s (per step)", or_dash(s->exposed_comm_s, "%.4f"));
    put("idle_s (per step)", or_dash(s->idle_s, "%.4f"));
    t.print(std::cout, "  ");
  } else {
    std::cout << "  none (no summary.json was ingested: the run did not finish or was not ingested)\n";
  }

  if (const auto p = db.prediction(r.id)) {  // schema v6: made when the sweep planned the run
    std::cout << "\nprediction (" << text_or_dash(p->hardware) << "; " << text_or_dash(p->calibration) << ")\n";
    TextTable t{{"", ""}, {false, true}, {}, false};
    t.rows.push_back({"tps (tokens/s/device)", or_dash(p->tps, "%.1f")});
    if (p->learned_from && *p->learned_from > 0) {  // schema v11: a sweep that learned as it ran
      t.rows.push_back({"  refitted on (measured points)", std::to_string(*p->learned_from)});
      t.rows.push_back({"  tps_prior (the spec as written)", or_dash(p->tps_prior, "%.1f")});
    }
    if (p->tps_low && p->tps_high)
      t.rows.push_back({"  80 % interval", or_dash(p->tps_low, "%.1f") + " - " + or_dash(p->tps_high, "%.1f")});
    if (p->tps_after) t.rows.push_back({"  tps_after (refitted with this run)", or_dash(p->tps_after, "%.1f")});
    t.rows.push_back({"step_time_s", or_dash(p->step_time_s, "%.4f")});
    t.rows.push_back({"mfu (%)", or_dash(p->mfu, "%.3f")});
    t.rows.push_back(
        {"mem_peak_bytes (per rank)",
         p->mem_peak_bytes ? std::to_string(*p->mem_peak_bytes) + " (" + bytes(p->mem_peak_bytes) + ")" : "-"});
    t.print(std::cout, "  ");
  }

  const auto env = db.env(r.id);
  std::cout << "\nenv (" << env.size() << ")\n";
  for (const auto& [k, v] : env) std::cout << "  " << k << " = " << v << "\n";

  const auto artifacts = db.artifacts(r.id);
  std::cout << "\nartifacts (" << artifacts.size() << ")\n";
  TextTable arts{{"", ""}, {false, false}, {}, false};
  for (const ArtifactRow& a : artifacts) arts.rows.push_back({a.kind, a.path});
  arts.print(std::cout, "  ");

  const auto steps = db.steps(r.id);
  const std::vector<size_t> shown = sample_rows(steps.size());
  std::cout << "\nsteps (" << shown.size() << " of " << steps.size() << " rows)\n";
  if (!steps.empty()) {
    TextTable t{{"rank", "step", "loss", "grad_norm", "tps", "mfu_%", "step_time_s", "data_time_s", "mem_peak"},
                {true, true, true, true, true, true, true, true, true},
                {}};
    for (size_t i : shown) {
      const nlohmann::json& s = steps[i];
      const auto mem = s["mem_peak_bytes"].is_number() ? std::optional<int64_t>(s["mem_peak_bytes"].get<int64_t>())
                                                       : std::nullopt;
      t.rows.push_back({s["rank"].dump(), s["step"].dump(), num(s["loss"], "%.4f"), num(s["grad_norm"], "%.4f"),
                        num(s["tps"], "%.0f"), num(s["mfu"], "%.2f"), num(s["step_time_s"], "%.4f"),
                        num(s["data_time_s"], "%.4f"), bytes(mem)});
    }
    t.print(std::cout, "  ");
  }
  const auto validation = db.validation(r.id);
  if (!validation.empty()) {
    std::cout << "\nvalidation (" << validation.size() << " passes)\n";
    TextTable t{{"step", "loss", "perplexity", "tokens", "time_s"}, {true, true, true, true, true}, {}};
    for (const nlohmann::json& v : validation)
      t.rows.push_back({v["step"].dump(), num(v["loss"], "%.4f"), num(v["perplexity"], "%.4g"), v["tokens"].dump(),
                        num(v["time_s"], "%.3f")});
    t.print(std::cout, "  ");
  }
  if (with_config) std::cout << "\nconfig.toml\n" << r.config_toml << (r.config_toml.ends_with('\n') ? "" : "\n");
}

}  // namespace

int run_db_command(const std::vector<std::string>& args) {
  CLI::App app{"Look inside a ctitan results database (the SQLite file a sweep writes).", "ctitan db"};
  app.require_subcommand(1);
  app.footer("Columns and units: docs/results.md. For anything else: sqlite3 FILE.");
  std::string db_path, sweep_name;
  int64_t run_id = 0;
  bool with_config = false;
  CLI::App* ls = app.add_subcommand("ls", "one line per run: id, sweep, label, world size, repeat, status, "
                                          "tps median, MFU, peak memory, final loss");
  ls->add_option("--db", db_path, "results database file")->required();
  ls->add_option("--sweep", sweep_name, "only the runs of this sweep");
  CLI::App* show = app.add_subcommand("show", "one run: its row, summary, env, artifacts, a compact step table and its validation passes");
  show->add_option("run_id", run_id, "the run's id (see `ctitan db ls`)")->required();
  show->add_option("--db", db_path, "results database file")->required();
  show->add_flag("--config", with_config, "also print the run's resolved config.toml");

  // CLI11 would call an unknown subcommand "A subcommand is required".
  if (!args.empty() && args[0] != "ls" && args[0] != "show" && args[0].rfind('-', 0) != 0)
    throw InputError("unknown db command '" + args[0] + "'; `ctitan db --help` lists ls and show");
  parse_command_line(app, args, "db");
  if (ls->parsed()) {
    list_runs(db_path, sweep_name);
  } else {
    show_run(db_path, run_id, with_config);
  }
  return 0;
}

}  // namespace ctitan
