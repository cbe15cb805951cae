// Opening a results database file: recognition, WAL, foreign keys, busy
// timeout and the migration steps (schema.cpp holds the schema itself).
#pragma once

#include <sqlite3.h>

#include <string>

namespace ctitan::results_detail {

// Opens `path` (creating it if absent), recognises it and migrates it to
// ResultsDb::kSchemaVersion. InputError, with the file untouched, for a file
// that is not a ctitan results database or is newer than this build.
sqlite3* open_and_migrate(const std::string& path);

int read_schema_version(sqlite3* db, const std::string& path);

}  // namespace ctitan::results_detail
