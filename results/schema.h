// Opening a results database file: recognition, WAL, foreign keys, busy
// timeout, the migration steps (schema.cpp holds the schema itself) and the
// check that every table of the schema is there.
#pragma once

#include <sqlite3.h>

#include <string>

namespace ctitan::results_detail {

// Opens `path` (creating it if absent), recognises it and migrates it to
// ResultsDb::kSchemaVersion. InputError, with the file untouched, for a file
// that is not a ctitan results database or is newer than this build.
sqlite3* open_and_migrate(const std::string& path);
// Opens an existing `path` read-only (SQLITE_OPEN_READONLY; nothing written,
// not even the switch to WAL). An older file is copied into memory and the
// copy migrated; the file stays as it was. A file without ctitan tables
// (empty): InputError. Missing tables: ResultsDbError.
sqlite3* open_for_reading(const std::string& path);

int read_schema_version(sqlite3* db, const std::string& path);

}  // namespace ctitan::results_detail
