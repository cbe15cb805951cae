// SQLite checks the unit and integration tests share.
#pragma once

#include <sqlite3.h>

#include <filesystem>
#include <string>

namespace ctitan::testing {

// True when `db` opens read-only and PRAGMA integrity_check answers "ok".
inline bool integrity_ok(const std::filesystem::path& db) {
  sqlite3* h = nullptr;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(h);
    return false;
  }
  sqlite3_stmt* st = nullptr;
  const bool ok = sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &st, nullptr) == SQLITE_OK &&
                  sqlite3_step(st) == SQLITE_ROW &&
                  std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))) == "ok";
  sqlite3_finalize(st);
  sqlite3_close(h);
  return ok;
}

}  // namespace ctitan::testing
