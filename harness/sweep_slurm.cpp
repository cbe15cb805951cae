// `ctitan sweep --launcher slurm`: one sbatch job per (point, repeat), the
// jobs followed through squeue / scontrol (sacct where accounting is on),
// finished run folders ingested, Slurm's states mapped to run statuses.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "common/errors.h"
#include "common/file_io.h"
#include "harness/launch.h"  // train_command
#include "harness/slurm.h"
#include "harness/sweep.h"
#include "harness/sweep_book.h"
#include "results/results_db.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {
using namespace sweep_detail;
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A run the driver follows: submitted (or about to be) and not finished.
struct Tracked {
  const SweepPoint* pt = nullptr;
  int repeat = 0;
  std::unique_ptr<Claim> claim;  // held until the run is recorded final
  RunRow row;
  SlurmJobRow job;
  std::string last_state;        // Slurm's state as last printed
  int unknown_polls = 0;         // polls in which Slurm knew nothing of the job
  Clock::time_point started{};   // when it was seen RUNNING (this driver's clock)
};

// "2:0" → (2, 0): the exit status and the signal of a finished job.
std::pair<int, int> parse_exit_code(const std::string& text) {
  const size_t colon = text.find(':');
  try {
    const int code = text.empty() ? 0 : std::stoi(text.substr(0, colon));
    const int sig = colon == std::string::npos ? 0 : std::stoi(text.substr(colon + 1));
    return {code, sig};
  } catch (const std::exception&) {
    return {0, 0};
  }
}

// The exit status the batch script wrote (srun's), if it got that far.
std::optional<int> script_exit(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "slurm_exit");
  int code = 0;
  if (in >> code) return code;
  return std::nullopt;
}

Outcome slurm_outcome(const SlurmJobRow& job, const std::string& state, const std::string& reason,
                      const std::string& exit_code, const std::string& dir, const std::string& time_limit) {
  const std::string tail_text = tail_lines(dir + "/stderr.log", 20);
  const std::string tail = tail_text.empty() ? "" : "\n" + tail_text;
  const std::string status = run_status_of(state);
  auto [code, sig] = parse_exit_code(exit_code);
  if (const auto written = script_exit(dir); written && code == 0 && sig == 0) code = *written;
  const std::string name = "Slurm job " + job.job_id;
  const std::string why = reason.empty() || reason == "None" ? "" : " (reason " + reason + ")";
  if (status == "ok") return {"ok", 0, ""};
  if (status == "timeout")
    return {"timeout", code, name + " ended " + state + why + ": over its time limit --time=" + time_limit + tail};
  if (status == "oom") return {"oom", code, name + " ran out of memory (OUT_OF_MEMORY)" + why + tail};
  if (status == "cancelled")
    return {"cancelled", code, name + " was cancelled (scancel, or by an administrator)" + why +
                                   "; a rerun of the sweep submits it again" + tail};
  if (state == "FAILED") {  // the script's exit status: the trainer's, through srun (exit 2: failed, see classify)
    ChildExit e;
    e.exit_code = sig != 0 ? 128 + sig : code;
    e.term_signal = sig;
    e.stderr_tail = tail_text;
    Outcome o = classify(e, 0);
    o.error = name + " FAILED: " + o.error;
    return o;
  }
  if (state == "LAUNCH_FAILED")
    return {"failed", std::nullopt, name + " could not be launched (" + reason +
                                        "; slurmd's log on the node says why); it was cancelled; rerun with "
                                        "--retry-failed" + tail};
  return {"failed", code, name + " ended " + state + why + "; rerun with --retry-failed" + tail};
}

class SlurmSweep {
 public:
  SlurmSweep(const SweepSpec& spec, const SweepOptions& opts, const SlurmOptions& slurm, ResultsDb& db,
             const SlurmClient& client, std::string time_limit)
      : spec_(spec), slurm_(slurm), client_(client), book_(spec, opts, db), time_(std::move(time_limit)) {}

  int run(const std::vector<SweepPoint>& points, const std::map<std::string, SlurmShape>& shapes) {
    shapes_ = &shapes;
    size_t infeasible = 0;
    for (const SweepPoint& pt : points)
      if (!pt.infeasible.empty()) book_.record_infeasible(pt), ++infeasible;
    counts_["infeasible"] = static_cast<int>(infeasible);
    std::vector<std::pair<const SweepPoint*, int>> queue;  // repeat-major: A B C A B C
    for (int r = 0; r < spec_.repeats; ++r)
      for (const SweepPoint& pt : points)
        if (pt.infeasible.empty()) queue.emplace_back(&pt, r);
    total_ = queue.size();
    std::cout << "sweep " << spec_.name << ": " << points.size() << " points (" << infeasible << " infeasible), "
              << total_ << " runs to check; Slurm launcher" << (slurm_.partition.empty() ? "" : ", partition " + slurm_.partition)
              << ", at most " << slurm_.max_queued << " jobs queued; results in " << book_.opts().db_path << std::endl;

    std::vector<std::unique_ptr<Tracked>> to_submit;
    for (const auto& [pt, r] : queue) {
      if (stop_requests() > 0) break;
      auto t = std::make_unique<Tracked>();
      t->pt = pt;
      t->repeat = r;
      t->claim = std::make_unique<Claim>(book_.lock_path(pt->key, r));
      if (!t->claim->try_lock()) {
        ++held_elsewhere_;
        continue;
      }
      Recorded rec = book_.recorded(*pt, r);
      if (rec.final_status) {
        ++counts_[*rec.final_status], ++done_;
        continue;
      }
      if (rec.mine && (rec.mine->status == "pending" || rec.mine->status == "running")) {
        std::optional<SlurmJobRow> job = book_.db().slurm_job(rec.mine->id);
        if (job && job->job_id.empty()) {  // killed between recording and sbatch's answer
          const std::vector<std::string> ids = client_.jobs_named(job->job_name);
          if (!ids.empty()) job->job_id = ids.front();
        }
        if (job && !job->job_id.empty()) {
          book_.db().put_slurm_job(*job);
          t->row = *rec.mine;
          t->job = *job;
          t->last_state = job->state;
          if (t->row.status == "running") t->started = Clock::now();
          line("attach", *t, "job " + t->job.job_id + " (" + (job->state.empty() ? "submitted" : job->state) +
                                 "), submitted by an earlier sweep process");
          tracked_.push_back(std::move(t));
          continue;
        }
        if (job) {  // recorded, never submitted: submit under the same row
          t->row = *rec.mine;
          t->job = *job;
          to_submit.push_back(std::move(t));
          continue;
        }
        rec.mine->status = "cancelled";  // a local run whose sweep is gone
        rec.mine->error = "the sweep process stopped before this run ended; a rerun runs it again";
        rec.mine->ended_at = utc_now();
        book_.db().update_run(*rec.mine);
      }
      to_submit.push_back(std::move(t));
    }

    size_t next = 0;
    auto interval = std::chrono::milliseconds(500);
    auto last_summary = Clock::now();
    while ((next < to_submit.size() || !tracked_.empty()) && stop_requests() == 0) {
      while (next < to_submit.size() && tracked_.size() < static_cast<size_t>(slurm_.max_queued) &&
             stop_requests() == 0) {
        submit(*to_submit[next]);
        tracked_.push_back(std::move(to_submit[next++]));
      }
      const bool changed = poll_once();
      if (Clock::now() - last_summary >= std::chrono::seconds(30)) {
        summary_line();
        last_summary = Clock::now();
      }
      // Back-off: quick while things change, up to 30 s between polls when nothing does.
      interval = changed ? std::chrono::milliseconds(500) : std::min(interval * 2, std::chrono::milliseconds(30000));
      const auto wake = Clock::now() + interval;
      while (Clock::now() < wake && stop_requests() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (stop_requests() > 0) return stopped();
    return finish();
  }

 private:
  void submit(Tracked& t) {
    const SweepPoint& pt = *t.pt;
    const std::string dir = book_.prepare_run_dir(pt, t.repeat);
    if (t.row.id == 0) {
      t.row = book_.new_row(pt, t.repeat);
      t.row.status = "pending";
      t.row.run_dir = dir;
      book_.insert(t.row, pt);
      t.job.run_id = t.row.id;
      t.job.job_name = "ctitan-" + pt.key + "-r" + std::to_string(t.repeat) + "-s" +
                       std::to_string(book_.sweep_id()) + "-" + std::to_string(t.row.id);
    }
    std::vector<std::string> argv = train_command({"--job.config_file", dir + "/point.toml"});
    if (!book_.opts().binary.empty()) argv[0] = book_.opts().binary;
    SlurmJob job;
    job.name = t.job.job_name;
    job.run_dir = dir;
    job.train_argv = argv;
    job.shape = shapes_->at(pt.key);
    job.time = time_;
    t.job.script = dir + "/job.sbatch";
    write_file_atomic(t.job.script, sbatch_script(slurm_, job));
    // Recorded before sbatch: a driver killed in between finds the job by its name.
    t.job.state.clear();
    book_.db().put_slurm_job(t.job);
    try {
      t.job.job_id = client_.submit(t.job.script);
    } catch (const InputError& e) {  // Slurm refused this job: the run fails, the sweep goes on
      t.row.status = "failed";
      t.row.error = e.what();
      t.row.ended_at = utc_now();
      book_.db().update_run(t.row);
      t.job.state = "REFUSED";
      book_.db().put_slurm_job(t.job);
      ++counts_["failed"], ++done_;
      line("failed", t, e.what());
      t.pt = nullptr;  // not followed
      return;
    }
    t.job.submitted_at = t.job.updated_at = utc_now();
    t.job.state = "PENDING";
    book_.db().put_slurm_job(t.job);
    t.last_state = "PENDING";
    line("submit", t, "job " + t.job.job_id);
  }

  // One poll of every followed job; true when any state changed.
  bool poll_once() {
    std::erase_if(tracked_, [](const auto& t) { return t->pt == nullptr; });
    if (tracked_.empty()) return false;
    std::vector<std::string> ids;
    for (const auto& t : tracked_) ids.push_back(t->job.job_id);
    std::vector<SlurmClient::JobState> states;
    try {
      states = client_.states(ids);
      if (controller_down_) std::cout << "sweep " << spec_.name << ": Slurm answers again" << std::endl;
      controller_down_ = false;
    } catch (const std::runtime_error& e) {  // the controller is away: keep waiting
      if (!controller_down_)
        std::cout << "sweep " << spec_.name << ": cannot reach Slurm (" << e.what() << "); retrying" << std::endl;
      controller_down_ = true;
      return false;
    }
    bool changed = false;
    for (auto& t : tracked_) {
      const auto it = std::find_if(states.begin(), states.end(),
                                   [&](const SlurmClient::JobState& s) { return s.id == t->job.job_id; });
      if (it == states.end()) {
        // Slurm has forgotten the job (past MinJobAge, no accounting): the
        // script's exit file is what is left; give a just-submitted job a few polls.
        if (++t->unknown_polls < 5) continue;
        const auto code = script_exit(t->row.run_dir);
        finalize(*t, code ? (*code == 0 ? "COMPLETED" : "FAILED") : "UNKNOWN",
                 code ? "" : "Slurm no longer knows the job and it left no exit status", code ? std::to_string(*code) + ":0" : "");
        changed = true;
        continue;
      }
      t->unknown_polls = 0;
      if (it->reason.rfind("launch failed", 0) == 0) {
        // Slurm could not start it on the node and holds it for an
        // administrator: it would wait for ever. Cancelled, recorded failed.
        client_.cancel({t->job.job_id});
        finalize(*t, "LAUNCH_FAILED", it->reason, "");
        changed = true;
        continue;
      }
      if (it->state == t->last_state) continue;
      changed = true;
      if (slurm_state_is_final(it->state)) {
        finalize(*t, it->state, it->reason, it->exit_code);
        continue;
      }
      const std::string status = run_status_of(it->state);
      const bool requeued = status == "pending" && t->row.status == "running";
      t->job.state = it->state;
      t->job.reason = it->reason;
      t->job.updated_at = utc_now();
      book_.db().put_slurm_job(t->job);
      if (status != t->row.status) {
        t->row.status = status;
        if (status == "running") {
          t->row.started_at = utc_now();
          t->started = Clock::now();
        }
        book_.db().update_run(t->row);
      }
      t->last_state = it->state;
      const std::string where = it->nodes.empty() || it->nodes == "(null)" ? "" : " on " + it->nodes;
      const std::string reason = it->reason.empty() || it->reason == "None" ? "" : " (" + it->reason + ")";
      line(requeued ? "requeued" : status == "running" ? "running" : "queued", *t,
           "job " + t->job.job_id + " " + it->state + reason + where);
    }
    std::erase_if(tracked_, [](const auto& t) { return t->pt == nullptr; });
    return changed;
  }

  void finalize(Tracked& t, const std::string& state, const std::string& reason, const std::string& exit_code) {
    Outcome o = state == "UNKNOWN" ? Outcome{"failed", std::nullopt,
                                             "Slurm job " + t.job.job_id + ": " + reason + "; rerun with --retry-failed"}
                                   : slurm_outcome(t.job, state, reason, exit_code, t.row.run_dir, time_);
    // Before the status: "ok" in the database means its numbers are there.
    o = SweepBook::vet(o, book_.ingest(t.row.id, t.row.run_dir));
    t.row.status = o.status;
    t.row.exit_code = o.exit_code;
    t.row.error = o.error;
    if (t.row.started_at.empty()) t.row.started_at = t.job.submitted_at;
    t.row.ended_at = utc_now();
    book_.db().update_run(t.row);
    t.job.state = state;
    t.job.reason = reason;
    t.job.updated_at = t.row.ended_at;
    book_.db().put_slurm_job(t.job);
    ++counts_[o.status], ++done_;
    if (t.started != Clock::time_point{}) {
      run_seconds_ += since(t.started);
      ++timed_runs_;
    }
    const std::string first = o.error.substr(0, o.error.find('\n'));
    line(o.status, t, "job " + t.job.job_id + (state == "COMPLETED" ? "" : " " + state) +
                          (t.started != Clock::time_point{} ? " (" + format_duration(since(t.started)) + ")" : "") +
                          (first.empty() ? "" : ": " + first));
    t.claim.reset();
    t.pt = nullptr;
  }

  void line(const std::string& what, const Tracked& t, const std::string& detail) const {
    std::string tag = what;
    tag.resize(std::max<size_t>(tag.size(), 9), ' ');
    std::cout << "sweep " << spec_.name << " [" << done_ << "/" << total_ << "] " << tag << " " << t.pt->key
              << " ws=" << t.pt->world_size << (t.pt->label.empty() ? "" : " " + t.pt->label)
              << (spec_.repeats > 1 ? " r" + std::to_string(t.repeat + 1) : "") << "  " << detail << std::endl;
  }

  void summary_line() const {
    size_t queued = 0, running = 0;
    for (const auto& t : tracked_) (t->row.status == "running" ? running : queued) += 1;
    int failed = 0;
    for (const auto& [status, n] : counts_)
      if (status != "ok" && status != "infeasible") failed += n;
    std::string eta = "-";
    if (timed_runs_ > 0) {  // the runs left, each as long as the mean, as many at once as now run
      const double mean = run_seconds_ / static_cast<double>(timed_runs_);
      const double left = mean * static_cast<double>(total_ - done_) / static_cast<double>(std::max<size_t>(1, running));
      eta = format_duration(left);
    }
    std::cout << "sweep " << spec_.name << ": " << queued << " queued, " << running << " running, " << done_ << "/"
              << total_ << " done (" << failed << " not ok), elapsed " << format_duration(since(t0_))
              << ", estimated remaining " << eta << std::endl;
  }

  std::vector<std::string> live_job_ids() const {
    std::vector<std::string> ids;
    for (const auto& t : tracked_)
      if (t->pt && !t->job.job_id.empty()) ids.push_back(t->job.job_id);
    return ids;
  }

  // Ctrl-C on a terminal: ask; otherwise (SIGTERM, no terminal) leave the jobs to Slurm.
  int stopped() {
    const std::vector<std::string> ids = live_job_ids();
    const char* sig = stop_signal() == SIGINT ? "SIGINT" : "SIGTERM";
    std::string list;
    for (const auto& id : ids) list += (list.empty() ? "" : ",") + id;
    bool cancel = false;
    if (!ids.empty() && stop_signal() == SIGINT && isatty(0) == 1 && isatty(1) == 1) {
      std::cout << "\nsweep " << spec_.name << ": cancel its " << ids.size() << " Slurm jobs (" << list
                << ")? [y/N] " << std::flush;
      const int seen = stop_requests();
      pollfd in{0, POLLIN, 0};
      while (stop_requests() == seen && ::poll(&in, 1, 100) == 0) {
      }
      std::string answer;
      if (stop_requests() == seen) std::getline(std::cin, answer);
      cancel = !answer.empty() && (answer[0] == 'y' || answer[0] == 'Y');
    }
    if (cancel) {
      const std::string err = client_.cancel(ids);
      if (!err.empty()) {
        std::cout << "sweep " << spec_.name << ": scancel failed: " << err << "; the jobs may still run" << std::endl;
      } else {
        for (auto& t : tracked_) {
          if (!t->pt) continue;
          t->row.status = "cancelled";
          t->row.error = "cancelled at Ctrl-C of the sweep (scancel " + t->job.job_id + ")";
          t->row.ended_at = utc_now();
          book_.db().update_run(t->row);
          t->job.state = "CANCELLED";
          t->job.updated_at = t->row.ended_at;
          book_.db().put_slurm_job(t->job);
        }
        std::cout << "sweep " << spec_.name << ": cancelled " << ids.size() << " Slurm jobs; a rerun submits them again"
                  << std::endl;
      }
    } else if (!ids.empty()) {
      std::cout << "sweep " << spec_.name << ": stopped by " << sig << "; its " << ids.size()
                << " Slurm jobs (" << list << ") stay in Slurm; run the same command again to follow them, or "
                << "`ctitan sweep --cancel " << spec_.path << " --db " << book_.opts().db_path << "` to cancel them"
                << std::endl;
    } else {
      std::cout << "sweep " << spec_.name << ": stopped by " << sig << "; no job of it is in Slurm; run the same "
                << "command again to continue" << std::endl;
    }
    return kExitInterrupted;
  }

  int finish() const {
    std::string summary;
    for (const auto& [status, n] : counts_)
      if (n > 0) summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + status;
    std::cout << "sweep " << spec_.name << ": " << summary << " in " << format_duration(since(t0_)) << std::endl;
    if (held_elsewhere_ > 0)
      std::cout << "sweep " << spec_.name << ": " << held_elsewhere_
                << " runs are being run by another sweep process on this database; rerun when it is done" << std::endl;
    const auto n = [&](const char* s) { return counts_.count(s) ? counts_.at(s) : 0; };
    if (n("failed") + n("timeout") + n("oom") + n("cancelled") > 0) {
      std::cout << "sweep " << spec_.name << ": some runs did not succeed; see `error` in the runs table, the run "
                << "folders' stderr.log, and rerun with --retry-failed" << std::endl;
      return kExitRunsFailed;
    }
    return 0;
  }

  const SweepSpec& spec_;
  const SlurmOptions& slurm_;
  const SlurmClient& client_;
  SweepBook book_;
  const std::string time_;
  const std::map<std::string, SlurmShape>* shapes_ = nullptr;
  std::vector<std::unique_ptr<Tracked>> tracked_;
  std::map<std::string, int> counts_;
  size_t total_ = 0, done_ = 0, held_elsewhere_ = 0, timed_runs_ = 0;
  double run_seconds_ = 0;
  bool controller_down_ = false;
  Clock::time_point t0_ = Clock::now();
};

}  // namespace

int run_sweep_slurm(const SweepSpec& spec, const std::vector<SweepPoint>& planned, const SweepOptions& opts,
                    const SlurmOptions& slurm) {
  // Everything Slurm must accept is checked before the database is opened.
  std::vector<SweepPoint> points = planned;
  std::map<std::string, SlurmShape> shapes;
  std::map<std::string, SlurmShape> distinct;  // one sbatch --test-only per allocation shape
  for (SweepPoint& pt : points) {
    SlurmShape shape;
    const std::string why = slurm_shape(slurm, pt.world_size, shape);
    if (!why.empty() && pt.infeasible.empty()) pt.infeasible = why;
    if (!pt.infeasible.empty()) continue;
    shapes[pt.key] = shape;
    distinct[std::to_string(shape.nodes) + "x" + std::to_string(shape.tasks_per_node)] = shape;
  }
  const std::string time_limit = slurm.time.empty() ? slurm_time(spec.timeout_s) : slurm.time;
  sweep_runs_folder(opts.db_path, spec.name);
  SlurmClient client;
  for (const auto& [name, shape] : distinct) client.preflight(slurm, shape, time_limit);
  ResultsDb db(opts.db_path);
  StopSignals signals;
  SlurmSweep sweep(spec, opts, slurm, db, client, time_limit);
  return sweep.run(points, shapes);
}

int cancel_sweep_slurm(const SweepSpec& spec, const std::string& db_path) {
  if (!fs::exists(db_path))
    throw InputError("sweep --cancel: " + db_path + " does not exist; give the --db the sweep ran with");
  ResultsDb db(db_path);
  const std::optional<SweepRow> sweep = db.sweep(spec.name);
  if (!sweep) throw InputError("sweep --cancel: " + db_path + " has no sweep named '" + spec.name + "'");
  SlurmClient client;
  std::vector<SlurmJobRow> live;
  for (SlurmJobRow& job : db.slurm_jobs(sweep->id)) {
    const std::optional<RunRow> run = db.run(job.run_id);
    if (!run || (run->status != "pending" && run->status != "running")) continue;
    if (job.job_id.empty()) {  // a driver killed between recording and sbatch's answer
      const std::vector<std::string> ids = client.jobs_named(job.job_name);
      if (ids.empty()) {
        RunRow r = *run;
        r.status = "cancelled";
        r.error = "never submitted; cancelled with ctitan sweep --cancel";
        r.ended_at = utc_now();
        db.update_run(r);
        continue;
      }
      job.job_id = ids.front();
    }
    live.push_back(job);
  }
  if (live.empty()) {
    std::cout << "sweep " << spec.name << ": no Slurm job of it is queued or running; nothing to cancel" << std::endl;
    return 0;
  }
  std::vector<std::string> ids;
  for (const auto& j : live) ids.push_back(j.job_id);
  const std::string err = client.cancel(ids);
  if (!err.empty()) throw std::runtime_error("sweep --cancel: scancel failed: " + err);
  std::string list;
  for (SlurmJobRow& job : live) {
    RunRow r = *db.run(job.run_id);
    r.status = "cancelled";
    r.error = "cancelled with ctitan sweep --cancel (scancel " + job.job_id + "); a rerun submits it again";
    r.ended_at = utc_now();
    db.update_run(r);
    job.state = "CANCELLED";
    job.updated_at = r.ended_at;
    db.put_slurm_job(job);
    list += (list.empty() ? "" : ",") + job.job_id;
  }
  std::cout << "sweep " << spec.name << ": cancelled " << live.size() << " Slurm jobs (" << list << ")" << std::endl;
  return 0;
}

}  // namespace ctitan
