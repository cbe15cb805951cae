// Thin RAII over SQLite's C API for results/ only: a prepared statement with
// bound parameters, and a write transaction. Every failure throws, so a
// caller never checks a return code: a fault of the file (throw_file_fault)
// as ResultsDbError, anything else as std::runtime_error naming the
// database file, SQLite's message and what was being done.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>

namespace ctitan::results_detail {

[[noreturn]] void throw_sqlite(sqlite3* db, const std::string& path, const std::string& doing);
// When db's last error is a fault of the file (damaged, disk full,
// read-only, I/O error, cannot open): throws ResultsDbError, one line
// naming the file and what to do. Otherwise returns.
void throw_file_fault(sqlite3* db, const std::string& path);

// Runs fixed SQL text (DDL, pragmas, BEGIN/COMMIT) that never contains a
// caller's string; everything with values goes through Statement.
void exec(sqlite3* db, const std::string& path, const char* sql);

class Statement {
 public:
  Statement(sqlite3* db, const std::string& path, const char* sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are numbered from 1 in the order given.
  template <class... T>
  Statement& bind_all(const T&... values) {
    int i = 0;
    (bind(++i, values), ...);
    return *this;
  }
  void bind(int i, int64_t v);
  void bind(int i, int v) { bind(i, static_cast<int64_t>(v)); }
  void bind(int i, double v);
  void bind(int i, const std::string& v);
  void bind(int i, const char* v) { bind(i, std::string(v)); }
  void bind(int i, std::nullopt_t);
  template <class T>
  void bind(int i, const std::optional<T>& v) {
    if (v) {
      bind(i, *v);
    } else {
      bind(i, std::nullopt);
    }
  }

  bool step();  // true while a row is available
  void run();   // a statement that returns no rows
  void reset(); // ready to bind and step again

  bool is_null(int col) const;
  int64_t int64(int col) const;
  double real(int col) const;
  std::string text(int col) const;  // "" for NULL
  std::optional<int64_t> opt_int64(int col) const;
  std::optional<double> opt_real(int col) const;

 private:
  sqlite3* db_;
  const std::string& path_;
  sqlite3_stmt* stmt_ = nullptr;
};

// BEGIN IMMEDIATE (takes the write lock now, waiting through the busy
// timeout, so two writers serialise instead of deadlocking on upgrade);
// rolled back unless commit() is reached.
class WriteTransaction {
 public:
  WriteTransaction(sqlite3* db, const std::string& path);
  ~WriteTransaction();
  WriteTransaction(const WriteTransaction&) = delete;
  WriteTransaction& operator=(const WriteTransaction&) = delete;
  void commit();

 private:
  sqlite3* db_;
  const std::string& path_;
  bool done_ = false;
};

}  // namespace ctitan::results_detail
