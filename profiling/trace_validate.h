// Checks a JSON value against the trace-event format (the JSON Object
// Format of Chrome's "Trace Event Format" document), as far as Perfetto and
// chrome://tracing rely on it:
//  - an object with a "traceEvents" array (or a bare array of events);
//  - every event an object with string "name" and "ph", integer "pid" and
//    "tid", number "ts" >= 0 (not required for 'M' metadata events);
//  - ph one of B E X i I C M b e n s t f (the phases ctitan and Kineto write);
//  - 'X' events: number "dur" >= 0; on each (pid, tid) they nest: two of
//    them either are disjoint or one contains the other;
//  - 'B'/'E' events: balanced per (pid, tid), E never before its B;
//  - 'C' events: "args" an object of numbers;
//  - "args", when present, an object.
// Returns the problems found (empty: valid), at most `limit` of them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ctitan {

std::vector<std::string> validate_chrome_trace(const nlohmann::json& trace, size_t limit = 20);

}  // namespace ctitan
