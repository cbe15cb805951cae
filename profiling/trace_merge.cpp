#include "profiling/trace_merge.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>

namespace ctitan {

nlohmann::json merge_traces(const std::vector<nlohmann::json>& rank_traces) {
  struct Rank {
    const nlohmann::json* trace;
    int64_t rank;
    double shift_us;  // added to every ts
  };
  std::vector<Rank> ranks;
  std::set<std::string> boots, hosts;
  std::set<int64_t> seen;
  for (const nlohmann::json& t : rank_traces) {
    const auto meta = t.find("ctitan");
    if (!t.contains("traceEvents") || meta == t.end() || !meta->contains("clock_anchor"))
      throw std::runtime_error("not a ctitan rank trace (no \"ctitan\" object with a clock_anchor)");
    const int64_t rank = meta->at("rank").get<int64_t>();
    if (!seen.insert(rank).second) throw std::runtime_error("two trace files are rank " + std::to_string(rank));
    const nlohmann::json& a = meta->at("clock_anchor");
    boots.insert(a.value("boot_id", ""));
    hosts.insert(a.value("hostname", ""));
    const double to_realtime_us =
        (a.at("realtime_ns").get<double>() - a.at("monotonic_ns").get<double>()) / 1e3;
    ranks.push_back({&t, rank, to_realtime_us});
  }
  const bool one_host = boots.size() == 1 && !boots.begin()->empty();
  if (one_host)
    for (Rank& r : ranks) r.shift_us = 0;
  std::sort(ranks.begin(), ranks.end(), [](const Rank& a, const Rank& b) { return a.rank < b.rank; });

  double origin = std::numeric_limits<double>::infinity();
  for (const Rank& r : ranks)
    for (const nlohmann::json& e : r.trace->at("traceEvents"))
      if (e.value("ph", "") != "M") origin = std::min(origin, e.at("ts").get<double>() + r.shift_us);
  if (!std::isfinite(origin)) origin = 0;

  nlohmann::json events = nlohmann::json::array(), per_rank = nlohmann::json::array();
  for (const Rank& r : ranks) {
    for (nlohmann::json e : r.trace->at("traceEvents")) {
      e["pid"] = r.rank;
      if (e.value("ph", "") != "M") e["ts"] = e.at("ts").get<double>() + r.shift_us - origin;
      events.push_back(std::move(e));
    }
    per_rank.push_back(r.trace->at("ctitan"));
  }
  std::string hosts_list;
  for (const auto& h : hosts) hosts_list += (hosts_list.empty() ? "" : ", ") + h;
  nlohmann::json meta = {
      {"version", 1},
      {"merged", true},
      {"clock", one_host ? "CLOCK_MONOTONIC (one host: shared by every rank, no correction)"
                         : "CLOCK_REALTIME via each rank's (monotonic, realtime) anchor; hosts " + hosts_list +
                               ": as aligned as their clocks are synchronised"},
      {"origin_us", origin},
      {"ranks", std::move(per_rank)}};
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"ctitan", std::move(meta)}};
}

std::map<int64_t, std::vector<std::filesystem::path>> find_rank_traces(const std::filesystem::path& run_dir) {
  namespace fs = std::filesystem;
  static const std::regex iteration(R"(iteration_(\d+))"), rank_file(R"(rank\d+_trace\.json)");
  std::map<int64_t, std::vector<fs::path>> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(run_dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it.depth() > 2) {
      it.disable_recursion_pending();
      continue;
    }
    std::smatch m;
    const std::string name = it->path().filename().string();
    if (!it->is_directory() || !std::regex_match(name, m, iteration)) continue;
    std::vector<fs::path> files;
    for (const auto& f : fs::directory_iterator(it->path()))
      if (std::regex_match(f.path().filename().string(), rank_file)) files.push_back(f.path());
    std::sort(files.begin(), files.end());
    if (!files.empty()) out[std::stoll(m[1].str())] = std::move(files);
  }
  return out;
}

}  // namespace ctitan
