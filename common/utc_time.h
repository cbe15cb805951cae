// The wall clock as ISO 8601 UTC ("2026-11-29T21:50:07Z"): the stamps a
// sweep writes into its database and a machine probe into its cache.
#pragma once

#include <string>

namespace ctitan {

std::string utc_now();

}  // namespace ctitan
