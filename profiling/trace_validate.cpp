#include "profiling/trace_validate.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <utility>

namespace ctitan {

std::vector<std::string> validate_chrome_trace(const nlohmann::json& trace, size_t limit) {
  std::vector<std::string> problems;
  auto problem = [&](const std::string& p) {
    if (problems.size() < limit) problems.push_back(p);
  };
  const nlohmann::json* events = nullptr;
  if (trace.is_array()) {
    events = &trace;
  } else if (trace.is_object() && trace.contains("traceEvents") && trace["traceEvents"].is_array()) {
    events = &trace["traceEvents"];
  } else {
    problem("not a trace: neither an array of events nor an object with a traceEvents array");
    return problems;
  }
  constexpr std::string_view kPhases = "BEXiICMbenstf";
  using Track = std::pair<int64_t, int64_t>;
  std::map<Track, std::vector<std::pair<double, double>>> complete;  // X events per track
  std::map<Track, std::vector<double>> open;                         // B events not yet ended
  for (size_t i = 0; i < events->size(); ++i) {
    const nlohmann::json& e = (*events)[i];
    const std::string at = "event " + std::to_string(i);
    if (!e.is_object()) {
      problem(at + ": not an object");
      continue;
    }
    if (!e.contains("name") || !e["name"].is_string()) problem(at + ": no string \"name\"");
    if (!e.contains("ph") || !e["ph"].is_string() || e["ph"].get<std::string>().size() != 1 ||
        kPhases.find(e["ph"].get<std::string>()[0]) == std::string_view::npos) {
      problem(at + ": \"ph\" missing or not one of " + std::string(kPhases));
      continue;
    }
    const char ph = e["ph"].get<std::string>()[0];
    if (!e.contains("pid") || !e["pid"].is_number_integer()) problem(at + ": no integer \"pid\"");
    if (!e.contains("tid") || !e["tid"].is_number_integer()) problem(at + ": no integer \"tid\"");
    if (e.contains("args") && !e["args"].is_object()) problem(at + ": \"args\" is not an object");
    if (ph == 'M') continue;
    if (!e.contains("ts") || !e["ts"].is_number() || e["ts"].get<double>() < 0) {
      problem(at + ": \"ts\" missing, not a number or negative");
      continue;
    }
    const double ts = e["ts"].get<double>();
    const Track track{e.value("pid", int64_t{0}), e.value("tid", int64_t{0})};
    if (ph == 'X') {
      if (!e.contains("dur") || !e["dur"].is_number() || e["dur"].get<double>() < 0) {
        problem(at + ": 'X' event without a number \"dur\" >= 0");
        continue;
      }
      complete[track].emplace_back(ts, ts + e["dur"].get<double>());
    } else if (ph == 'B') {
      open[track].push_back(ts);
    } else if (ph == 'E') {
      auto& stack = open[track];
      if (stack.empty()) {
        problem(at + ": 'E' without a 'B' on pid " + std::to_string(track.first) + " tid " + std::to_string(track.second));
      } else {
        if (ts < stack.back()) problem(at + ": 'E' before its 'B'");
        stack.pop_back();
      }
    } else if (ph == 'C') {
      if (!e.contains("args") || !e["args"].is_object()) {
        problem(at + ": 'C' event without an args object");
      } else {
        for (const auto& [k, v] : e["args"].items())
          if (!v.is_number()) problem(at + ": counter series '" + k + "' is not a number");
      }
    }
  }
  for (const auto& [track, stack] : open)
    if (!stack.empty())
      problem(std::to_string(stack.size()) + " 'B' events never ended on pid " + std::to_string(track.first) +
              " tid " + std::to_string(track.second));
  for (auto& [track, spans] : complete) {
    // Sorted by start, longest first at equal starts: each span must end
    // inside every enclosing span still open (a stack of ends).
    std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    // Timestamps are microseconds as doubles: adjacent events that share a
    // boundary (the next starts where the last ended) may differ by a rounding
    // error, so boundaries are compared with 1 ns of slack.
    constexpr double kSlackUs = 1e-3;
    std::vector<double> ends;
    for (const auto& [b, e] : spans) {
      while (!ends.empty() && ends.back() <= b + kSlackUs) ends.pop_back();
      if (!ends.empty() && e > ends.back() + kSlackUs) {
        problem("'X' events overlap without nesting on pid " + std::to_string(track.first) + " tid " +
                std::to_string(track.second) + " at ts " + std::to_string(b));
        break;
      }
      ends.push_back(e);
    }
  }
  return problems;
}

}  // namespace ctitan
