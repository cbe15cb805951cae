// `ctitan gate`: a candidate against a baseline (reports/gate.h), for CI.
//
//   ctitan gate --db FILE --baseline SEL --candidate SEL [options]
//   ctitan gate --db FILE --baseline-file FILE --candidate SEL [options]
//   ctitan gate --db FILE --baseline SEL --write-baseline-file FILE
// SEL: sweep:NAME (or NAME), sha:GITSHA, label:LABEL.
// Exit codes: 0 pass, 1 regression, 3 needs action (inconclusive, missing
// data, different hardware or LibTorch), 2 bad input.
#pragma once

#include <string>
#include <vector>

namespace ctitan {

int gate_command(const std::vector<std::string>& args);

}  // namespace ctitan
