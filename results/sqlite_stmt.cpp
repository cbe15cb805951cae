#include "results/sqlite_stmt.h"

#include <filesystem>
#include <stdexcept>

#include "results/results_db.h"  // ResultsDbError

namespace ctitan::results_detail {
namespace {

bool disk_nearly_full(const std::string& path) {
  std::error_code ec;
  const std::filesystem::space_info space = std::filesystem::space(std::filesystem::absolute(path).parent_path(), ec);
  return !ec && space.available < (std::uintmax_t{1} << 20);
}

}  // namespace

void throw_file_fault(sqlite3* db, const std::string& path) {
  if (!db) return;
  const int code = sqlite3_errcode(db);  // the primary code: SQLITE_IOERR for every SQLITE_IOERR_*
  std::string sqlite = "(sqlite: ";
  sqlite += sqlite3_errmsg(db);
  sqlite += ")";
  std::string line;
  switch (code) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      line = "results database " + path + " is damaged " + sqlite + "; restore it from a copy, or recover what is left with `sqlite3 " +
             path + " .recover | sqlite3 NEW.db` and pass NEW.db";
      break;
    case SQLITE_FULL:
      line = "results database " + path + ": the disk is full " + sqlite +
             "; the write was rolled back, so the file is consistent; free space and run the same command again";
      break;
    case SQLITE_READONLY:
      line = "results database " + path + " is read-only " + sqlite +
             " and this command writes to it; make it writable or pass another --db";
      break;
    case SQLITE_IOERR:
      // A full disk shows as an I/O error where SQLite cannot grow its -shm index.
      line = "results database " + path + (disk_nearly_full(path) ? ": the disk is full " : ": an I/O error ") + sqlite +
             "; free space (or check the disk) and run the same command again";
      break;
    case SQLITE_CANTOPEN:
      line = "cannot open results database " + path + " " + sqlite +
             "; check that its folder exists and is writable (SQLite keeps " + path + "-wal and -shm beside it)";
      break;
    default:
      return;
  }
  throw ResultsDbError(line);
}

void throw_sqlite(sqlite3* db, const std::string& path, const std::string& doing) {
  throw_file_fault(db, path);
  throw std::runtime_error("results database " + path + ": " + doing + " failed: " +
                           (db ? sqlite3_errmsg(db) : "out of memory"));
}

void exec(sqlite3* db, const std::string& path, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string msg = err ? err : sqlite3_errmsg(db);
    sqlite3_free(err);
    throw_file_fault(db, path);
    throw std::runtime_error("results database " + path + ": " + msg + " (in: " + std::string(sql).substr(0, 60) + ")");
  }
}

Statement::Statement(sqlite3* db, const std::string& path, const char* sql) : db_(db), path_(path) {
  if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) throw_sqlite(db_, path_, "preparing a query");
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::bind(int i, int64_t v) {
  if (sqlite3_bind_int64(stmt_, i, v) != SQLITE_OK) throw_sqlite(db_, path_, "binding a value");
}

void Statement::bind(int i, double v) {
  if (sqlite3_bind_double(stmt_, i, v) != SQLITE_OK) throw_sqlite(db_, path_, "binding a value");
}

void Statement::bind(int i, const std::string& v) {
  if (sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT) != SQLITE_OK)
    throw_sqlite(db_, path_, "binding a value");
}

void Statement::bind(int i, std::nullopt_t) {
  if (sqlite3_bind_null(stmt_, i) != SQLITE_OK) throw_sqlite(db_, path_, "binding a value");
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  throw_sqlite(db_, path_, std::string("running `") + sqlite3_sql(stmt_) + "`");
}

void Statement::run() {
  while (step()) {
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

bool Statement::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
int64_t Statement::int64(int col) const { return sqlite3_column_int64(stmt_, col); }
double Statement::real(int col) const { return sqlite3_column_double(stmt_, col); }

std::string Statement::text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, col))) : std::string();
}

std::optional<int64_t> Statement::opt_int64(int col) const {
  return is_null(col) ? std::nullopt : std::optional<int64_t>(int64(col));
}

std::optional<double> Statement::opt_real(int col) const {
  return is_null(col) ? std::nullopt : std::optional<double>(real(col));
}

WriteTransaction::WriteTransaction(sqlite3* db, const std::string& path) : db_(db), path_(path) {
  exec(db_, path_, "BEGIN IMMEDIATE");
}

WriteTransaction::~WriteTransaction() {
  if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

void WriteTransaction::commit() {
  exec(db_, path_, "COMMIT");
  done_ = true;
}

}  // namespace ctitan::results_detail
