// Exposed communication: the seconds a rank spends blocked waiting for a
// collective of one group, per group (tp, cp, ep), for the metrics'
// exposed-communication figures. Every parallelism's regions wait through
// wait_exposed; the trainer reads and clears each group's ledger once per
// step (take_exposed_seconds).
#pragma once

#include "trainer/distributed/comm.h"

namespace ctitan {

// Waits for `w`, counting the time as exposed communication of `g`.
void wait_exposed(const WorkPtr& w, Communicator& g);

// Seconds the calling ranks spent blocked in `g`'s collectives waited for
// by wait_exposed since the last call.
double take_exposed_seconds(const Communicator& g);

}  // namespace ctitan
