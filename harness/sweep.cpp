// The sweep runner: the child supervisor, outcome classification, the
// resume / claim logic against the results database, and the progress line.
#include "harness/sweep.h"

#include <fcntl.h>       // open, O_CLOEXEC
#include <sys/file.h>    // flock
#include <sys/statvfs.h> // statvfs: free space where a run failed
#include <sys/ioctl.h>   // TIOCGWINSZ
#include <unistd.h>      // gethostname, isatty

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <toml++/toml.h>

#include "common/errors.h"
#include "common/file_io.h"
#include "common/subprocess.h"
#include "harness/launch.h"  // train_command: this binary's `ctitan train` argv
#include "harness/sweep_book.h"
#include "harness/sweep_learn.h"
#include "planner/plan.h"
#include "results/results_db.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/config_registry.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace sweep_detail {
namespace {
std::atomic<int> g_stop_signal{0};
std::atomic<int> g_stop_count{0};
extern "C" void on_sweep_signal(int sig) {
  g_stop_signal = sig;
  g_stop_count.fetch_add(1);
}

std::string hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}
}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  g_stop_count = 0;
  struct sigaction sa {};
  sa.sa_handler = on_sweep_signal;
  sa.sa_flags = SA_RESTART;  // SQLite and file I/O do not see EINTR
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}
StopSignals::~StopSignals() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}
int stop_requests() { return g_stop_count.load(); }
int stop_signal() { return g_stop_signal.load(); }

std::string tail_lines(const std::string& path, size_t max_lines) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 16384);
  in.seekg(from);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = std::min(text.find('\n', start), text.size());
    if (end > start) lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (from > 0 && !lines.empty()) lines.erase(lines.begin());  // cut mid-line
  std::string out;
  for (size_t i = lines.size() > max_lines ? lines.size() - max_lines : 0; i < lines.size(); ++i)
    out += (out.empty() ? "" : "\n") + lines[i];
  return out;
}

Claim::Claim(const fs::path& path) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) throw InputError(write_error_line(path.parent_path().string(), ec.value()));
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw InputError(write_error_line(path.string(), errno));
}
Claim::~Claim() { close(fd_); }
bool Claim::try_lock() { return flock(fd_, LOCK_EX | LOCK_NB) == 0; }
// A blocking flock would restart after SA_RESTART handlers and ignore Ctrl-C.
bool Claim::lock_unless_stopped() {
  while (!try_lock()) {
    if (g_stop_count > 0) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

fs::path sweep_runs_folder(const std::string& db_path, const std::string& sweep) {
  check_sweep_name(sweep);
  const fs::path root = fs::absolute(db_path + ".runs");
  const fs::path folder = root / sweep;
  std::error_code ec_root, ec_folder;
  const fs::path real_root = fs::weakly_canonical(root, ec_root);
  const fs::path real = fs::weakly_canonical(folder, ec_folder);
  if (ec_root || ec_folder || real.parent_path() != real_root) {
    std::string line = "sweep '" + sweep + "': its run folder " + folder.string() + " leads outside " + root.string();
    if (!ec_folder) line += " (to " + real.string() + ")";
    line += "; run folders stay inside <db>.runs: remove that link, or rename the sweep";
    throw InputError(line);
  }
  return folder;
}

bool disk_full(const std::string& text, const std::string& dir) {
  for (const char* says : {"No space left on device", "Disk quota exceeded", "database or disk is full"})
    if (text.find(says) != std::string::npos) return true;
  struct statvfs st {};
  return statvfs(dir.c_str(), &st) == 0 && static_cast<uint64_t>(st.f_bavail) * st.f_frsize < (uint64_t{1} << 20);
}

}  // namespace sweep_detail

namespace {
using namespace sweep_detail;

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool contains_any(const std::string& text, std::initializer_list<const char*> needles) {
  for (const char* n : needles)
    if (text.find(n) != std::string::npos) return true;
  return false;
}

// The trainer's one-line error ("ctitan: ..."), found in a (rank-prefixed) tail.
std::string trainer_error_line(const std::string& tail) {
  std::string found;
  size_t start = 0;
  while (start < tail.size()) {
    size_t end = std::min(tail.find('\n', start), tail.size());
    std::string line = tail.substr(start, end - start);
    if (line.rfind("[rank", 0) == 0 && line.find("]: ") != std::string::npos) line = line.substr(line.find("]: ") + 3);
    if (line.rfind("ctitan: ", 0) == 0 && found.empty()) found = line.substr(8);
    start = end + 1;
  }
  return found;
}

// Terminal: a status line redrawn in place, finished runs printed above it.
// Otherwise: one plain log line per run start and end.
class Progress {
 public:
  Progress(std::string sweep, size_t total) : sweep_(std::move(sweep)), total_(total), tty_(isatty(1) == 1) {}

  void begin(const SweepPoint& pt, int repeat, int repeats) {
    current_ = "ws=" + std::to_string(pt.world_size) + " " + pt.label +
               (repeats > 1 ? " r" + std::to_string(repeat + 1) + "/" + std::to_string(repeats) : "");
    current_start_ = Clock::now();
    if (!tty_) std::cout << prefix() << "run  " << pt.key << " " << current_ << std::endl;
    last_draw_ = Clock::time_point{};
    tick();
  }
  void end(const std::string& status, const std::string& key, double seconds) {
    ++done_, ++ran_;
    ran_seconds_ += seconds;
    const std::string line = prefix(done_) + pad(status) + " " + key + " " + current_ + " (" + format_duration(seconds) + ")";
    current_.clear();
    if (tty_) std::cout << "\r\033[K";
    std::cout << line << std::endl;
    last_draw_ = Clock::time_point{};
    tick();
  }
  // A (point, repeat) the database already has an outcome for.
  void skipped() {
    ++done_;
    tick();
  }
  size_t ran() const { return ran_; }
  void tick() {
    if (!tty_ || Clock::now() - last_draw_ < std::chrono::milliseconds(500)) return;
    last_draw_ = Clock::now();
    std::string line = "[" + std::to_string(done_) + "/" + std::to_string(total_) + "] " + sweep_ + "  elapsed " +
                       format_duration(since(start_)) + "  ETA " + eta() + (current_.empty() ? "" : "  " + current_);
    winsize w{};
    const size_t cols = ioctl(1, TIOCGWINSZ, &w) == 0 && w.ws_col > 10 ? w.ws_col : 120;
    if (line.size() >= cols) line = line.substr(0, cols - 1);
    std::cout << "\r\033[K" << line << std::flush;
  }
  void clear() {
    if (tty_) std::cout << "\r\033[K" << std::flush;
  }
 private:
  // From the runs so far: what is left, each as long as their mean.
  std::string eta() const {
    if (ran_ == 0) return "-";
    const double left = ran_seconds_ / static_cast<double>(ran_) * static_cast<double>(total_ - done_) -
                        (current_.empty() ? 0 : since(current_start_));
    return format_duration(std::max(0.0, left));
  }
  std::string prefix(size_t n = SIZE_MAX) const {
    return "sweep " + sweep_ + " [" + std::to_string(n == SIZE_MAX ? done_ + 1 : n) + "/" + std::to_string(total_) +
           "] ";
  }
  static std::string pad(std::string s) {
    s.resize(std::max<size_t>(s.size(), 10), ' ');
    return s;
  }

  std::string sweep_, current_;
  size_t total_, done_ = 0, ran_ = 0;
  double ran_seconds_ = 0;
  bool tty_;
  Clock::time_point start_ = Clock::now(), last_draw_{}, current_start_{};
};

}  // namespace

std::string format_duration(double s) {
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600, static_cast<int>(s) / 60 % 60);
  }
  return buf;
}

std::string run_dir_of(const std::string& db_path, const std::string& sweep, const std::string& point_key,
                       int repeat) {
  return (fs::absolute(db_path + ".runs") / sweep / (point_key + "-r" + std::to_string(repeat))).string();
}

ChildExit supervise(const std::vector<std::string>& argv, const std::string& stdout_path,
                    const std::string& stderr_path, double timeout_s, std::chrono::seconds grace,
                    const std::function<void()>& tick) {
  SpawnOptions opts;
  opts.argv = argv;
  opts.out = Output::to_file(stdout_path);
  opts.err = Output::to_file(stderr_path);
  opts.group = 0;  // a group of its own: a stop reaches the run's every process
  opts.die_with_parent = true;
  opts.exec_failure_line = "ctitan sweep: cannot execute " + argv[0] + "\n";
  const auto t0 = Clock::now();
  const Child child = spawn(opts);
  const GroupEnd end =
      supervise_group(child, t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)),
                      grace, [] { return g_stop_count.load(); }, tick);
  ChildExit e;
  e.exit_code = end.status.code;
  e.term_signal = end.status.signal;
  e.timed_out = end.timed_out;
  e.cancelled = end.stopped;
  e.seconds = since(t0);
  e.stderr_tail = tail_lines(stderr_path, 20);
  return e;
}

Outcome classify(const ChildExit& e, double timeout_s) {
  const std::string tail = e.stderr_tail.empty() ? "" : "\n" + e.stderr_tail;
  const std::string after = " after " + format_duration(e.seconds);
  if (e.cancelled)
    return {"cancelled", e.exit_code, "stopped by the sweep (SIGINT/SIGTERM)" + after + "; a rerun runs it again" + tail};
  if (e.timed_out)
    return {"timeout", e.exit_code,
            "timed out" + after + " (timeout_s = " + format_duration(timeout_s) + "); its process group was stopped" +
                tail};
  if (e.exit_code == 0 && e.term_signal == 0) return {"ok", 0, ""};
  if (contains_any(e.stderr_tail, {"out of memory", "can't allocate memory", "Cannot allocate memory",
                                   "std::bad_alloc", "OutOfMemoryError"}))
    return {"oom", e.exit_code, "out of memory (exit code " + std::to_string(e.exit_code) + ")" + tail};
  if (e.term_signal == SIGKILL || e.exit_code == 128 + SIGKILL)
    return {"oom", e.exit_code, "killed by SIGKILL, which the sweep did not send: most likely the kernel's OOM killer" +
                                    tail};
  if (e.exit_code == 2 && e.term_signal == 0) {  // bad input met at run time: the planner could not know
    const std::string line = trainer_error_line(e.stderr_tail);
    return {"failed", e.exit_code,
            "the trainer rejected its input (exit code 2): " + (line.empty() ? std::string("see stderr.log") : line) + tail};
  }
  if (e.term_signal == SIGINT || e.term_signal == SIGTERM || e.exit_code == 130 || e.exit_code == 143)
    return {"cancelled", e.exit_code, "stopped by a signal from outside the sweep (exit code " +
                                          std::to_string(e.exit_code) + ")" + tail};
  const std::string how = e.term_signal != 0 ? "killed by signal " + std::to_string(e.term_signal) + " (" +
                                                   (sigabbrev_np(e.term_signal) ? sigabbrev_np(e.term_signal) : "?") + ")"
                                             : "exited with code " + std::to_string(e.exit_code);
  return {"failed", e.exit_code, how + tail};
}

namespace {

// What the planner predicted for a point, as the database keeps it beside
// each of the point's runs (a predicted throughput of 0 — a stand-in spec —
// is none; a point the planner rejected keeps only its place in the plan).
PredictionRow prediction_row(const SweepPoint& pt) {
  PredictionRow row;
  row.plan_index = pt.plan_index;
  if (!pt.prediction) return row;
  const Prediction& p = *pt.prediction;
  const auto positive = [](double v) { return v > 0 ? std::optional<double>(v) : std::nullopt; };
  row.hardware = p.hardware;
  row.calibration = p.calibration;
  row.tps = positive(p.tps_per_device);
  row.step_time_s = row.tps ? positive(p.time.step) : std::nullopt;
  row.mfu = row.tps ? positive(p.mfu) : std::nullopt;
  row.mem_peak_bytes = static_cast<int64_t>(p.memory.total);
  row.detail_json = to_json(p).dump();
  row.tps_prior = pt.prior_tps;
  row.learned_from = pt.learned_from;
  if (row.tps && pt.tps_interval) row.tps_low = pt.tps_interval->first, row.tps_high = pt.tps_interval->second;
  return row;
}

// What a resumed sweep may change in its spec: how long and where its runs
// go, how many repeats, what its points are checked against. Everything
// else (base, world_sizes, steps, [overrides], [grid], [[exclude]],
// [[include]], [[stack]]) says which points the sweep is.
constexpr const char* kResumeKeys[] = {"name", "timeout_s", "memory_budget_gb", "hardware", "launcher", "repeats"};
constexpr const char* kResumeTables[] = {"slurm", "published"};

// The first part of spec text `now` that differs from `before` outside what
// a resume may change ("[grid]", "[sweep] world_sizes"); "" when none does,
// or when `before` is not a spec (a sweep made through the API).
//
// The stored spec ends with a line naming the hash of its resolved base
// recipe (kBaseLine, below): an edited base is another sweep, whose points
// would otherwise pile up under the old name with the same labels.
constexpr const char* kBaseLine = "# ctitan: resolved base ";

std::string base_line_of(const std::string& text) {
  const size_t at = text.rfind(kBaseLine);
  if (at == std::string::npos) return "";
  return text.substr(at, text.find('\n', at) - at);
}

std::string spec_difference(const std::string& before, const std::string& now) {
  if (before.empty()) return "";
  const std::string base_before = base_line_of(before), base_now = base_line_of(now);
  if (!base_before.empty() && !base_now.empty() && base_before != base_now) return "base recipe";
  toml::table a, b;
  try {
    check_toml_nesting(before, "the stored spec");
    a = toml::parse(before);
    b = toml::parse(now);
  } catch (const std::exception&) {  // not a spec, or too deep to compare: nothing to hold it to
    return "";
  }
  for (toml::table* t : {&a, &b}) {
    if (toml::table* sweep = (*t)["sweep"].as_table())
      for (const char* key : kResumeKeys) sweep->erase(key);
    for (const char* table : kResumeTables) t->erase(table);
  }
  std::set<std::string> tables;
  for (const toml::table* t : {&a, &b})
    for (const auto& [key, node] : *t) tables.insert(std::string(key.str()));
  for (const std::string& table : tables) {
    const toml::table* sa = a[table].as_table();
    const toml::table* sb = b[table].as_table();
    if (table == "sweep" && sa && sb) {
      std::set<std::string> keys;
      for (const toml::table* t : {sa, sb})
        for (const auto& [key, node] : *t) keys.insert(std::string(key.str()));
      for (const std::string& key : keys)
        if (!((*sa)[key] == (*sb)[key])) return "[sweep] " + key;
    } else if (!(a[table] == b[table])) {
      return "[" + table + "]";
    }
  }
  return "";
}

// The spec file as stored with the sweep: absolute, symlinks resolved.
std::string spec_file(const SweepSpec& spec) {
  if (spec.path.empty()) return "";
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(spec.path), ec);
  return ec ? fs::absolute(spec.path).string() : p.string();
}

}  // namespace

namespace sweep_detail {

SweepBook::SweepBook(const SweepSpec& spec, const SweepOptions& opts, ResultsDb& db)
    : spec_(spec), opts_(opts), db_(db), host_(hostname()), locks_(fs::absolute(opts.db_path + ".runs") / ".locks") {
  const std::string file = spec_file(spec);
  // The base's settings as loaded (comments and layout do not count).
  std::string text = spec.text;
  if (!spec.base_path.empty()) {
    JobConfig base;
    config::load_toml_into(base, spec.base_path, nullptr);
    if (!text.empty() && text.back() != '\n') text += '\n';
    text += kBaseLine;
    text += config_hash(base) + " (" + spec.base_path + ")\n";
  }
  const SweepRow row = db_.open_sweep(spec.name, text, file, [&](const SweepRow& was) {
    const std::string differs = spec_difference(was.spec_toml, text);
    if (differs.empty()) return;
    std::string line = "sweep '" + spec.name + "' in " + opts.db_path + " was run from ";
    if (differs == "base recipe") {
      line += "a base recipe whose settings have changed since (" + spec.base_path +
              "; the points of an edited base are other points)";
    } else if (!was.spec_path.empty() && was.spec_path == file) {
      line += file + " with another " + differs + " (the file has changed since)";
    } else {
      line += was.spec_path.empty() ? std::string("another spec") : was.spec_path;
      line += "; " + (file.empty() ? spec.name : file) + " is a different spec with the same name (its " + differs +
              " differs)";
    }
    line += "; a resumed sweep may change only timeout_s, memory_budget_gb, hardware, launcher, repeats, [slurm] "
            "and [published]: rename this sweep ([sweep] name; ok runs of the same points are shared, not rerun) "
            "or pass another --db";
    throw InputError(line);
  });
  sweep_id_ = row.id;
}

void SweepBook::record_infeasible(const SweepPoint& pt) {
  Claim claim(lock_path(pt.key, 0));
  if (!claim.lock_unless_stopped()) return;
  for (const RunRow& r : db_.runs_of_point(pt.key)) {  // newest first: this sweep's last word on the point
    if (r.sweep_id != sweep_id_ || r.repeat != 0) continue;
    if (r.status == "ok" || (r.status == "infeasible" && r.error == pt.infeasible)) return;
    break;
  }
  RunRow row = new_row(pt, 0);
  row.status = "infeasible";
  row.error = pt.infeasible;
  row.started_at = row.ended_at = utc_now();
  insert(row, pt);
}

Recorded SweepBook::recorded(const SweepPoint& pt, int repeat) {
  Recorded out;
  std::optional<RunRow> ok_elsewhere;
  for (const RunRow& r : db_.runs_of_point(pt.key)) {  // newest first
    if (r.repeat != repeat) continue;
    if (r.sweep_id == sweep_id_ && !out.mine) out.mine = r;
    if (r.sweep_id == sweep_id_ && r.status == "ok") {
      out.final_status = "ok";
      return out;
    }
    if (r.status == "ok" && !ok_elsewhere) ok_elsewhere = r;
  }
  if (ok_elsewhere && opts_.share) {  // the same measurement, made by another sweep: shared
    RunRow row = *ok_elsewhere;
    row.sweep_id = sweep_id_;
    row.label = pt.label;
    row.error = "shared: the results of run " + std::to_string(ok_elsewhere->id) + " of another sweep";
    row.status = "running";  // ok once its numbers are in: a fault in between leaves it to be redone
    insert(row, pt);
    ingest(row.id, row.run_dir);
    row.status = "ok";
    db_.update_run(row);
    out.final_status = "ok";
    return out;
  }
  const auto& m = out.mine;
  if (m && !opts_.retry_failed && (m->status == "failed" || m->status == "timeout" || m->status == "oom"))
    out.final_status = m->status;
  return out;
}

std::string SweepBook::prepare_run_dir(const SweepPoint& pt, int repeat) const {
  const std::string dir = run_dir_of(opts_.db_path, spec_.name, pt.key, repeat);
  std::error_code ec;
  fs::remove_all(dir, ec);  // a cancelled or failed attempt must not be resumed from its checkpoint
  if (!ec) fs::create_directories(dir, ec);
  if (ec) throw InputError(write_error_line(dir, ec.value()));
  JobConfig cfg = run_config(pt, repeat);
  cfg.job.dump_folder = dir;
  // Checked, synced and renamed into place: a point file cut short by a full
  // disk must never reach the trainer (which would refuse it anyway).
  write_file_atomic((fs::path(dir) / "point.toml").string(), to_toml(cfg));
  return dir;
}

JobConfig SweepBook::run_config(const SweepPoint& pt, int repeat) const {
  JobConfig cfg = pt.config;
  if (spec_.quality) cfg.debug.seed += repeat;
  return cfg;
}

RunRow SweepBook::new_row(const SweepPoint& pt, int repeat) const {
  RunRow row;
  row.sweep_id = sweep_id_;
  row.point_key = pt.key;
  row.label = pt.label;
  row.config_toml = spec_.quality && repeat > 0 ? to_toml(run_config(pt, repeat)) : pt.config_toml;
  row.config_hash = pt.config_hash;
  row.world_size = pt.world_size;
  row.repeat = repeat;
  row.host = host_;
  return row;
}

void SweepBook::insert(RunRow& row, const SweepPoint& pt) { row.id = db_.insert_run(row, prediction_row(pt)); }

IngestReport SweepBook::ingest(int64_t run_id, const std::string& dir) {
  try {
    return db_.ingest_run_dir(run_id, dir);
  } catch (const ResultsDbError&) {
    throw;
  } catch (const std::exception& e) {  // a partial run dir is still a recorded run
    std::cerr << "ctitan sweep: warning: run " << run_id << ": " << e.what() << std::endl;
    IngestReport none;
    none.partial = true;
    none.notes.push_back(e.what());
    return none;
  }
}

Outcome SweepBook::vet(Outcome o, const IngestReport& ingested) {
  if (o.status != "ok" || !ingested.summary_status.empty()) return o;
  std::string why;
  for (const std::string& note : ingested.notes) why += (why.empty() ? "" : "; ") + note;
  return {"failed", o.exit_code,
          "exited 0 but left no readable summary.json (" + (why.empty() ? std::string("no summary") : why) +
              "), so its numbers are not there; rerun with --retry-failed"};
}

void SweepBook::abandon(RunRow& row, const std::string& why) noexcept {
  try {
    row.status = "cancelled";
    row.exit_code.reset();
    row.error = "the sweep stopped during this run (" + why + "); a rerun runs it again";
    row.ended_at = utc_now();
    db_.update_run(row);
  } catch (...) {  // the database cannot be written either: the row stays running, unclaimed
  }
}

fs::path SweepBook::lock_path(const std::string& key, int repeat) const {
  return locks_ / (key + "-r" + std::to_string(repeat) + ".lock");
}

}  // namespace sweep_detail

namespace {

// One invocation of a sweep against the database, running each point here.
class SweepRunner {
 public:
  SweepRunner(const SweepSpec& spec, const SweepOptions& opts, ResultsDb& db) : book_(spec, opts, db) {}

  void record_infeasible(const SweepPoint& pt) { book_.record_infeasible(pt); }

  // What to do with (pt, repeat) given the database; runs it when needed.
  // Returns the final status, or "" when another process holds its claim
  // (or, waiting for it, the sweep was stopped).
  std::string visit(const SweepPoint& pt, int repeat, Progress& progress, bool wait_for_claim) {
    Claim claim(book_.lock_path(pt.key, repeat));
    if (!(wait_for_claim ? claim.lock_unless_stopped() : claim.try_lock())) return "";
    Recorded rec = book_.recorded(pt, repeat);
    if (rec.mine && (rec.mine->status == "running" || rec.mine->status == "pending")) {
      // Its claim is free: the sweep that ran (or submitted) it is gone
      // (killed, or stopped by a full disk before it could say so).
      rec.mine->status = "cancelled";
      rec.mine->error = "the sweep process stopped before this run ended; a rerun runs it again";
      rec.mine->ended_at = utc_now();
      book_.db().update_run(*rec.mine);
    }
    if (rec.final_status) {
      progress.skipped();
      return *rec.final_status;
    }
    return execute(pt, repeat, progress);
  }

  // The run execute() last inserted (0: none yet).
  int64_t last_run_id() const { return last_run_id_; }
  SweepBook& book() { return book_; }

 private:
  std::string execute(const SweepPoint& pt, int repeat, Progress& progress) {
    const SweepOptions& opts = book_.opts();
    const std::string dir = book_.prepare_run_dir(pt, repeat);
    const std::string point_toml = (fs::path(dir) / "point.toml").string();
    // World size 1: `ctitan train`; N: `ctitan launch --nproc N -- <train args>`.
    std::vector<std::string> argv = train_command({"--job.config_file", point_toml});
    if (!opts.binary.empty()) argv[0] = opts.binary;
    if (pt.world_size > 1)
      argv = {argv[0], "launch", "--nproc", std::to_string(pt.world_size), "--", "--job.config_file", point_toml};

    RunRow row = book_.new_row(pt, repeat);
    row.status = "running";
    row.run_dir = dir;
    row.started_at = utc_now();
    book_.insert(row, pt);
    Outcome o;
    double seconds = 0;
    bool full = false;
    try {
      progress.begin(pt, repeat, book_.spec().repeats);
      const ChildExit e = supervise(argv, dir + "/stdout.log", dir + "/stderr.log", book_.spec().timeout_s,
                                    opts.grace, [&] { progress.tick(); });
      seconds = e.seconds;
      o = classify(e, book_.spec().timeout_s);
      // Before the status: "ok" in the database means its numbers are there.
      const IngestReport ingested = book_.ingest(row.id, dir);
      o = SweepBook::vet(o, ingested);
      std::string notes;
      for (const std::string& n : ingested.notes) notes += n + "\n";
      if (o.status == "failed" && disk_full(o.error + "\n" + notes, dir)) {
        // Not the point's fault: it runs again once there is space.
        full = true;
        o.status = "cancelled";
        o.error = "its run folder could not be written: the disk is full; the sweep stopped, and a rerun runs it "
                  "again\n" + o.error;
      }
      row.status = o.status;
      row.exit_code = o.exit_code;
      row.error = o.error;
      row.ended_at = utc_now();
      book_.db().update_run(row);
    } catch (const std::exception& ex) {
      progress.clear();
      book_.abandon(row, ex.what());
      throw;
    }
    progress.end(o.status, pt.key, seconds);
    last_run_id_ = row.id;
    if (full)
      throw InputError("sweep " + book_.spec().name + " stopped: the disk holding " + dir +
                       " is full (run " + std::to_string(row.id) +
                       " could not write its folder and is recorded cancelled); free space and run the same command "
                       "again: it runs that point again and continues");
    return o.status;
  }

  SweepBook book_;
  int64_t last_run_id_ = 0;
};

// Learning as the sweep runs (harness/sweep_learn.h): the points still to
// run, predicted again after each measured one, reordered fastest first
// within their repeat, and checked again against the memory budget.
class SweepLearning {
 public:
  SweepLearning(const SweepSpec& spec, std::vector<SweepPoint>& points) {
    budget_ = device_budget(spec);
    for (const SweepPoint& pt : points)
      if (pt.infeasible.empty() && pt.prediction && pt.prediction->tps_per_device > 0) {
        gpu_ = on_gpu(pt.config, budget_);
        learner_.emplace(point_planning(budget_, gpu_));
        break;
      }
    if (!learner_ || !learner_->learning()) learner_.reset();
    for (SweepPoint& pt : points)
      if (pt.prediction && pt.prediction->tps_per_device > 0) pt.prior_tps = pt.prediction->tps_per_device;
  }

  // After (pt, repeat) ended with `status` in run `run_id`: learn from
  // its first ok measurement, predict the rest of `queue` (from `next` on)
  // again; the points the refitted plan proves too large are returned.
  std::vector<SweepPoint*> after_run(SweepPoint& pt, const std::string& status, int64_t run_id, ResultsDb& db,
                                     std::vector<std::pair<SweepPoint*, int>>& queue, size_t next) {
    std::vector<SweepPoint*> pruned;
    if (!learner_ || status != "ok" || !learned_.insert(pt.key).second || pt.world_size < 1) return pruned;
    if (on_gpu(pt.config, budget_) != gpu_) return pruned;
    const std::optional<SummaryRow> sum = db.summary(run_id);
    if (!sum || !sum->tps_median || *sum->tps_median <= 0) return pruned;
    const double predicted = pt.prediction ? pt.prediction->tps_per_device : 0;
    learner_->add(pt, *sum->tps_median, sum->mem_peak_bytes ? static_cast<double>(*sum->mem_peak_bytes) : 0,
                  predicted, pt.learned_from);
    // This run's prediction after the refit that took it in.
    if (std::optional<PredictionRow> row = db.prediction(run_id)) {
      try {
        row->tps_after = learner_->predict(pt).tps_per_device;
        db.put_prediction(*row);
      } catch (const InputError&) {
      }
    }
    std::set<SweepPoint*> seen;
    for (size_t i = next; i < queue.size(); ++i) {
      SweepPoint* q = queue[i].first;
      if (!seen.insert(q).second || learned_.count(q->key) || on_gpu(q->config, budget_) != gpu_) continue;
      try {
        q->prediction = learner_->predict(*q);
      } catch (const InputError&) {
        continue;  // the layout was predicted before; it still is what it was
      }
      q->learned_from = learner_->fitted_on();
      q->tps_interval = learner_->interval(q->prediction->tps_per_device);
      if (std::string why = infeasibility(q->config, q->world_size, budget_, &*q->prediction, ""); !why.empty()) {
        q->infeasible = why + " (the plan refitted on " + std::to_string(learner_->fitted_on()) +
                        " measured points of this sweep)";
        pruned.push_back(q);
      }
    }
    // Fastest first within this repeat, as order_by_prediction ordered
    // them; every later repeat then runs the points in this repeat's order
    // (A B C A B C).
    const auto speed = [](const SweepPoint* p) {
      return p->prediction ? p->prediction->tps_per_device * p->world_size : 0.0;
    };
    const int repeat = next > 0 ? queue[next - 1].second : 0;
    auto block_end = queue.begin() + static_cast<std::ptrdiff_t>(next);
    while (block_end != queue.end() && block_end->second == repeat) ++block_end;
    std::stable_sort(queue.begin() + static_cast<std::ptrdiff_t>(next), block_end,
                     [&](const auto& a, const auto& b) { return speed(a.first) > speed(b.first); });
    std::map<const SweepPoint*, size_t> place;
    for (auto it = queue.begin(); it != block_end; ++it)
      if (it->second == repeat) place.emplace(it->first, place.size());
    const auto at = [&](const SweepPoint* p) {
      const auto f = place.find(p);
      return f == place.end() ? place.size() : f->second;
    };
    std::stable_sort(block_end, queue.end(), [&](const auto& a, const auto& b) {
      return a.second != b.second ? a.second < b.second : at(a.first) < at(b.first);
    });
    std::cout << "sweep: planner refitted on " << learner_->fitted_on() << " measured point"
              << (learner_->fitted_on() == 1 ? "" : "s") << describe_error() << std::endl;
    return pruned;
  }

 private:
  // ": the last predictions made before their runs were off by a median of 7.9 %".
  std::string describe_error() const {
    const std::vector<double>& r = learner_->residuals();
    if (r.empty()) return "";
    std::vector<double> a;
    for (double x : r) a.push_back(std::fabs(std::exp(-x) - 1));  // predicted / measured - 1
    std::sort(a.begin(), a.end());
    const double med = a.size() % 2 ? a[a.size() / 2] : (a[a.size() / 2 - 1] + a[a.size() / 2]) / 2;
    char buf[160];
    std::snprintf(buf, sizeof buf, "; its predictions made before their runs were off by a median of %.1f %% (%zu run%s)",
                  100 * med, a.size(), a.size() == 1 ? "" : "s");
    return buf;
  }

  DeviceBudget budget_;
  bool gpu_ = false;
  std::optional<SweepLearner> learner_;
  std::set<std::string> learned_;
};

}  // namespace

namespace {

// The closing lines of a sweep (or a paired run) and its exit code.
int summarize(const std::string& name, std::map<std::string, int>& counts, size_t ran, size_t total,
              Clock::time_point t0) {
  std::string summary;
  for (const auto& [status, n] : counts)
    if (n > 0) summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + status;
  std::cout << "sweep " << name << ": " << summary << "; ran " << ran << " of " << total << " runs in "
            << format_duration(since(t0)) << std::endl;
  if (g_stop_count > 0) {
    std::cout << "sweep " << name << ": stopped by " << (g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM")
              << "; the database is consistent; run the same command again to continue" << std::endl;
    return kExitInterrupted;
  }
  if (counts["failed"] + counts["timeout"] + counts["oom"] + counts["cancelled"] > 0) {
    std::cout << "sweep " << name << ": some runs did not succeed; see `error` in the runs table, the run "
              << "folders' stderr.log, and rerun with --retry-failed" << std::endl;
    return kExitRunsFailed;
  }
  return 0;
}

}  // namespace

int run_sweep(const SweepSpec& spec, const std::vector<SweepPoint>& planned, const SweepOptions& opts) {
  sweep_runs_folder(opts.db_path, spec.name);  // InputError, before anything is written
  ResultsDb db(opts.db_path);  // InputError, before anything is written, for a file that is not one
  StopSignals signals;
  const auto t0 = Clock::now();
  SweepRunner runner(spec, opts, db);
  std::vector<SweepPoint> points = planned;  // predicted again as the sweep learns
  SweepLearning learning(spec, points);
  std::map<std::string, int> counts;
  size_t infeasible = 0;
  for (const SweepPoint& pt : points)
    if (!pt.infeasible.empty()) runner.record_infeasible(pt), ++infeasible;
  counts["infeasible"] = static_cast<int>(infeasible);

  // Repeat-major: A B C A B C.
  std::vector<std::pair<SweepPoint*, int>> queue, deferred;
  for (int r = 0; r < spec.repeats; ++r)
    for (SweepPoint& pt : points)
      if (pt.infeasible.empty()) queue.emplace_back(&pt, r);
  std::cout << "sweep " << spec.name << ": " << points.size() << " points (" << infeasible << " infeasible), "
            << queue.size() << " runs to check; results in " << opts.db_path << std::endl;
  Progress progress(spec.name, queue.size());
  for (size_t i = 0; i < queue.size(); ++i) {
    if (g_stop_count > 0) break;
    const auto [pt, r] = queue[i];
    const int64_t before = runner.last_run_id();
    const std::string status = runner.visit(*pt, r, progress, false);
    if (status.empty()) deferred.emplace_back(pt, r);  // another sweep is running it
    else ++counts[status];
    if (runner.last_run_id() == before) continue;  // nothing ran: nothing new to learn
    std::set<SweepPoint*> pruned;
    for (SweepPoint* p : learning.after_run(*pt, status, runner.last_run_id(), db, queue, i + 1)) {
      runner.record_infeasible(*p);
      ++counts["infeasible"];
      pruned.insert(p);
    }
    if (!pruned.empty())
      queue.erase(std::remove_if(queue.begin() + static_cast<std::ptrdiff_t>(i + 1), queue.end(),
                                 [&](const auto& e) { return pruned.count(e.first) > 0; }),
                  queue.end());
  }
  for (const auto& [pt, r] : deferred) {  // wait for the other sweep, then take what it recorded
    const std::string status = runner.visit(*pt, r, progress, true);
    if (status.empty()) break;  // stopped while waiting
    ++counts[status];
  }
  progress.clear();
  return summarize(spec.name, counts, progress.ran(), queue.size(), t0);
}

int run_paired(const PairedSide& base, const PairedSide& cand, int pairs, uint64_t seed) {
  if (base.points.size() != cand.points.size())
    throw InputError("gate --run: the sides plan different points (" + std::to_string(base.points.size()) + " vs " +
                     std::to_string(cand.points.size()) + "); an override must not add or remove points");
  for (size_t i = 0; i < base.points.size(); ++i)
    if (base.points[i].label != cand.points[i].label || base.points[i].world_size != cand.points[i].world_size)
      throw InputError("gate --run: point " + std::to_string(i + 1) + " differs between the sides ('" +
                       base.points[i].label + "' vs '" + cand.points[i].label + "')");
  sweep_runs_folder(base.opts.db_path, base.spec.name);
  sweep_runs_folder(cand.opts.db_path, cand.spec.name);
  ResultsDb db(base.opts.db_path);
  StopSignals signals;
  const auto t0 = Clock::now();
  SweepRunner a(base.spec, base.opts, db), b(cand.spec, cand.opts, db);
  db.set_paired_with(cand.spec.name, base.spec.name);  // the report shows paired speedups
  std::map<std::string, int> counts;
  std::vector<size_t> both;  // points feasible on both sides; the others are recorded as infeasible
  for (size_t i = 0; i < base.points.size(); ++i) {
    if (!base.points[i].infeasible.empty()) a.record_infeasible(base.points[i]);
    if (!cand.points[i].infeasible.empty()) b.record_infeasible(cand.points[i]);
    if (base.points[i].infeasible.empty() && cand.points[i].infeasible.empty()) both.push_back(i);
  }
  const std::string name = base.spec.name + " vs " + cand.spec.name;
  std::cout << "gate: " << both.size() << " points x " << pairs << " pairs, baseline and candidate back to back; "
            << "results in " << base.opts.db_path << std::endl;
  Progress progress(name, 2 * both.size() * static_cast<size_t>(pairs));
  std::mt19937_64 order(seed);
  for (int r = 0; r < pairs && g_stop_count == 0; ++r) {
    for (size_t i : both) {
      const bool cand_first = (order() & 1) != 0;  // a seeded coin per pair
      for (int k = 0; k < 2 && g_stop_count == 0; ++k) {
        const bool run_cand = (k == 0) == cand_first;
        const std::string status = (run_cand ? b : a).visit(run_cand ? cand.points[i] : base.points[i], r, progress,
                                                            /*wait_for_claim=*/true);
        if (!status.empty()) ++counts[status];
      }
    }
  }
  progress.clear();
  return summarize(name, counts, progress.ran(), 2 * both.size() * static_cast<size_t>(pairs), t0);
}

}  // namespace ctitan
