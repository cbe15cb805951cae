#include "profiling/trace.h"
#include "common/errors.h"
#include "common/file_io.h"

#include <ATen/record_function.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>

#include "profiling/memory.h"

namespace ctitan {
namespace {

std::atomic<CollectiveObserver*> g_observer{nullptr};

int64_t to_ns(CollectiveObserver::TimePoint t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

}  // namespace

CollectiveObserver* collective_observer() { return g_observer.load(std::memory_order_relaxed); }
void set_collective_observer(CollectiveObserver* observer) { g_observer.store(observer); }

int64_t trace_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t current_thread_tid() {
  thread_local const int64_t tid = static_cast<int64_t>(::syscall(SYS_gettid));
  return tid;
}

// Each thread appends to its own buffer; stop() drains them all. The mutex
// is only contended while stop() runs.
struct Tracer::ThreadBuffer {
  std::mutex mu;
  std::vector<TraceEvent> events;
  int64_t tid = 0;
};

Tracer& Tracer::get() {
  static Tracer* tracer = [] {
    auto* t = new Tracer();  // never deleted: see the header
    set_collective_observer(t);
    return t;
  }();
  return *tracer;
}

Tracer::ThreadBuffer& Tracer::buffer() {
  // Buffers outlive their threads (a thread that exits mid-session keeps its
  // events); a handful of threads ever record, so they are never freed.
  thread_local ThreadBuffer* mine = nullptr;
  if (mine == nullptr) {
    mine = new ThreadBuffer();
    mine->tid = current_thread_tid();
    std::lock_guard<std::mutex> lock(mu_);
    threads_.push_back(mine);
    torch_tids_[at::RecordFunction::currentThreadId()] = mine->tid;
  }
  return *mine;
}

void Tracer::start() {
  std::lock_guard<std::mutex> lock(mu_);
  for (ThreadBuffer* b : threads_) {
    std::lock_guard<std::mutex> block(b->mu);
    b->events.clear();
  }
  collectives_.clear();
  ++session_;
  trace_detail::g_recording.store(true);
}

std::vector<TraceEvent> Tracer::stop() {
  trace_detail::g_recording.store(false);
  const int64_t now = trace_now_ns();
  std::vector<TraceEvent> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (ThreadBuffer* b : threads_) {
      std::lock_guard<std::mutex> block(b->mu);
      std::move(b->events.begin(), b->events.end(), std::back_inserter(all));
      b->events.clear();
    }
  }
  auto comm = collective_events(now);
  std::move(comm.begin(), comm.end(), std::back_inserter(all));
  std::stable_sort(all.begin(), all.end(), [](const TraceEvent& a, const TraceEvent& b) { return a.ts_ns < b.ts_ns; });
  return all;
}

void Tracer::name_thread(const std::string& name) {
  const int64_t tid = buffer().tid;
  std::lock_guard<std::mutex> lock(mu_);
  names_[tid] = name;
}

std::unordered_map<int64_t, std::string> Tracer::thread_names() const {
  std::lock_guard<std::mutex> lock(mu_);
  return names_;
}

std::unordered_map<uint64_t, int64_t> Tracer::torch_thread_ids() const {
  std::lock_guard<std::mutex> lock(mu_);
  return torch_tids_;
}

void Tracer::complete(std::string name, const char* cat, int64_t begin_ns, int64_t end_ns, nlohmann::json args,
                      int64_t track) {
  if (!recording()) return;
  ThreadBuffer& b = buffer();
  std::lock_guard<std::mutex> lock(b.mu);
  b.events.push_back({std::move(name), cat, 'X', begin_ns, std::max<int64_t>(end_ns - begin_ns, 0),
                      track >= 0 ? track : b.tid, std::move(args)});
}

void Tracer::counter(const char* name, int64_t ts_ns, nlohmann::json values) {
  if (!recording()) return;
  ThreadBuffer& b = buffer();
  std::lock_guard<std::mutex> lock(b.mu);
  b.events.push_back({name, trace_cat::kMemory, 'C', ts_ns, 0, b.tid, std::move(values)});
}

uint64_t Tracer::issued(const char* op, const std::string& group, int64_t bytes, const std::string& dtype) {
  if (!recording()) return 0;
  const int64_t now = trace_now_ns();
  std::lock_guard<std::mutex> lock(mu_);
  collectives_.push_back({op, group, dtype, bytes, now});
  return (session_ << 32) | collectives_.size();
}

void Tracer::wait_returned(uint64_t token, TimePoint wait_began, TimePoint wait_ended) {
  if (token == 0 || !recording()) return;
  std::string name = "wait";
  nlohmann::json args;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if ((token >> 32) != session_) return;
    Collective& c = collectives_.at((token & 0xffffffffu) - 1);
    ++c.waits;
    c.blocked_ns += to_ns(wait_ended) - to_ns(wait_began);
    name += " " + c.op + " " + c.group;
    args = {{"collective", static_cast<int64_t>(token & 0xffffffffu) - 1}};
  }
  complete(std::move(name), trace_cat::kWait, to_ns(wait_began), to_ns(wait_ended), std::move(args));
}

void Tracer::settled(uint64_t token, TimePoint finished, bool ok) {
  if (token == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if ((token >> 32) != session_) return;
  Collective& c = collectives_.at((token & 0xffffffffu) - 1);
  c.settled_ns = to_ns(finished);
  c.ok = ok;
}

std::vector<TraceEvent> Tracer::collective_events(int64_t stop_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  // Lanes: within a group, a collective takes the first lane free at its
  // issue time, so overlapping collectives never share a track and every
  // track's 'X' events nest trivially.
  std::map<std::string, std::vector<int64_t>> lane_ends;
  std::map<std::string, size_t> group_index;
  std::vector<size_t> order(collectives_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return collectives_[a].issued_ns < collectives_[b].issued_ns; });
  std::vector<TraceEvent> out;
  for (size_t i : order) {
    const Collective& c = collectives_[i];
    const bool done = c.settled_ns >= 0;
    const int64_t end = done ? std::max(c.settled_ns, c.issued_ns) : stop_ns;
    auto& lanes = lane_ends[c.group];
    const size_t g = group_index.emplace(c.group, group_index.size()).first->second;
    size_t lane = 0;
    while (lane < lanes.size() && lanes[lane] > c.issued_ns) ++lane;
    if (lane == lanes.size()) lanes.push_back(0);
    lanes[lane] = end;
    const int64_t track = kCommTrackBase + static_cast<int64_t>(100 * g + lane);
    names_[track] = "comm " + c.group + " #" + std::to_string(lane);
    nlohmann::json args = {{"collective", static_cast<int64_t>(i)}, {"op", c.op},      {"group", c.group},
                           {"bytes", c.bytes},                        {"dtype", c.dtype}, {"waited", c.waits > 0},
                           {"blocked_us", c.blocked_ns / 1e3},        {"completed", done && c.ok}};
    if (!done) args["note"] = "still in flight when tracing stopped";
    out.push_back({c.op + " " + c.group, trace_cat::kCollective, 'X', c.issued_ns, end - c.issued_ns, track,
                   std::move(args)});
  }
  return out;
}

void TraceRange::open(const char* cat, std::string_view name, std::string_view suffix) {
  cat_ = cat;
  name_.reserve(name.size() + suffix.size() + 1);
  name_.append(name);
  if (!suffix.empty()) name_.append(" ").append(suffix);
  begin_ns_ = trace_now_ns();
}

void TraceRange::close() {
  const int64_t end = trace_now_ns();
  Tracer& tracer = Tracer::get();
  tracer.complete(std::move(name_), cat_, begin_ns_, end, std::move(args_));
  if (!accounting_allocator_installed()) return;
  // Live tensor bytes by category at the end of every range: Perfetto draws
  // one counter track per category under the rank.
  nlohmann::json live = nlohmann::json::object();
  const auto cats = memory_by_category();
  for (size_t c = 0; c < cats.size(); ++c)
    live[memory_category_name(static_cast<MemoryCategory>(c))] = cats[c].current_bytes;
  tracer.counter("live tensor bytes", end, std::move(live));
}

void TraceRange::set_arg(const char* key, nlohmann::json value) {
  if (begin_ns_ >= 0) args_[key] = std::move(value);
}

nlohmann::json clock_anchor() {
  // The two clocks read back to back, three times; the tightest pair wins.
  int64_t best_gap = INT64_MAX, mono = 0, real = 0;
  for (int i = 0; i < 3; ++i) {
    timespec a{}, r{}, b{};
    clock_gettime(CLOCK_MONOTONIC, &a);
    clock_gettime(CLOCK_REALTIME, &r);
    clock_gettime(CLOCK_MONOTONIC, &b);
    const int64_t na = a.tv_sec * 1'000'000'000LL + a.tv_nsec, nb = b.tv_sec * 1'000'000'000LL + b.tv_nsec;
    if (nb - na < best_gap) {
      best_gap = nb - na;
      mono = na + (nb - na) / 2;
      real = r.tv_sec * 1'000'000'000LL + r.tv_nsec;
    }
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return {{"monotonic_ns", mono},
          {"realtime_ns", real},
          {"hostname", host},
          {"boot_id", read_first_line("/proc/sys/kernel/random/boot_id")}};
}

namespace {

nlohmann::json metadata_event(const char* name, int64_t pid, int64_t tid, nlohmann::json args) {
  return {{"name", name}, {"ph", "M"}, {"ts", 0}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

}  // namespace

nlohmann::json chrome_trace(const std::vector<TraceEvent>& events, const TraceFileInfo& info,
                            const std::unordered_map<int64_t, std::string>& thread_names) {
  nlohmann::json list = nlohmann::json::array();
  const int64_t pid = info.rank;
  list.push_back(metadata_event("process_name", pid, 0, {{"name", "rank " + std::to_string(info.rank)}}));
  list.push_back(metadata_event("process_sort_index", pid, 0, {{"sort_index", info.rank}}));
  std::map<int64_t, bool> tids;
  for (const TraceEvent& e : events) tids[e.tid] = true;
  for (const auto& [tid, _] : tids) {
    auto it = thread_names.find(tid);
    const std::string name = it != thread_names.end() ? it->second : "thread " + std::to_string(tid);
    list.push_back(metadata_event("thread_name", pid, tid, {{"name", name}}));
    // Training thread and its ops first, then the communication lanes, the GPU streams, the rest.
    int64_t order = 1'000'000;
    if (name == "training") {
      order = 0;
    } else if (tid >= kOpTrackBase) {
      order = 1;
    } else if (tid >= kGpuTrackBase) {
      order = 100'000 + (tid - kGpuTrackBase) % 100'000;
    } else if (tid >= kCommTrackBase) {
      order = 10 + (tid - kCommTrackBase);
    }
    list.push_back(metadata_event("thread_sort_index", pid, tid, {{"sort_index", order}}));
  }
  for (const TraceEvent& e : events) {
    nlohmann::json j = {{"name", e.name}, {"cat", e.cat},  {"ph", std::string(1, e.ph)},
                        {"ts", e.ts_ns / 1e3}, {"pid", pid}, {"tid", e.tid}};
    if (e.ph == 'X') j["dur"] = e.dur_ns / 1e3;
    if (e.ph == 'i') j["s"] = "t";
    if (!e.args.is_null()) j["args"] = e.args;
    list.push_back(std::move(j));
  }
  nlohmann::json meta = {{"version", 1},
                         {"rank", info.rank},
                         {"world_size", info.world_size},
                         {"pid", static_cast<int64_t>(::getpid())},
                         {"clock", "CLOCK_MONOTONIC"},
                         {"clock_anchor", clock_anchor()},
                         {"steps", {info.first_step, info.last_step}},
                         {"op_source", info.op_source},
                         {"gpu_source", info.gpu_source}};
  if (info.extra.is_object())
    for (auto it = info.extra.begin(); it != info.extra.end(); ++it) meta[it.key()] = it.value();
  return {{"traceEvents", std::move(list)}, {"displayTimeUnit", "ms"}, {"ctitan", std::move(meta)}};
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) throw InputError(write_error_line(p.parent_path().string(), ec.value()));
  write_file_atomic(path, j.dump() + "\n");
}

}  // namespace ctitan
