// SQL that takes a results database of the current schema back to an older
// one, for the tests that open older files: each step undoes one migration
// of results/schema.cpp (the older steps are spelled out where a test needs them).
#pragma once

namespace ctitan::testing {

// v13 -> v12: issue 59's straggler, goodput and MFU columns and tables.
inline constexpr const char* kUndoSchemaV13 =
    "ALTER TABLE summaries DROP COLUMN straggler_rank; ALTER TABLE summaries DROP COLUMN straggler_persistence; "
    "ALTER TABLE summaries DROP COLUMN straggler_share; ALTER TABLE summaries DROP COLUMN straggler_spread_s; "
    "ALTER TABLE summaries DROP COLUMN straggler_marked; ALTER TABLE summaries DROP COLUMN wall_s; "
    "ALTER TABLE summaries DROP COLUMN goodput; ALTER TABLE summaries DROP COLUMN steady_tokens; ALTER TABLE summaries DROP COLUMN peak_flops; "
    "ALTER TABLE summaries DROP COLUMN peak_flops_source; ALTER TABLE summaries DROP COLUMN mfu_by_dtype; "
    "ALTER TABLE summaries DROP COLUMN useful_mfu; DROP TABLE goodput; DROP TABLE rank_steps; ";

}  // namespace ctitan::testing
