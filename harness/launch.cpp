#include "harness/launch.h"

#include <arpa/inet.h>   // htonl, ntohs
#include <fcntl.h>       // pipe2, O_CLOEXEC
#include <netinet/in.h>  // sockaddr_in
#include <poll.h>        // poll
#include <sys/socket.h>  // socket, bind, getsockname
#include <unistd.h>      // access, readlink

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "common/errors.h"
#include "common/subprocess.h"
#include "harness/cli.h"

namespace ctitan {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxRanks = 64;
// How long stopped ranks get to finish their step and write summary.json
// between SIGTERM and SIGKILL.
constexpr auto kGracePeriod = std::chrono::seconds(5);
// How long output of processes that escaped the rank group may keep the
// pipes open after every rank has exited.
constexpr auto kDrainPeriod = std::chrono::seconds(1);
// A "line" this long without a newline is passed on as one, so a rank that
// never prints '\n' cannot grow the launcher's memory.
constexpr size_t kMaxLineBytes = 64 * 1024;

std::vector<int> parse_rank_list(const std::string& text, int nproc) {
  std::vector<int> ranks;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 3 ||
        std::stoi(item) >= nproc)
      throw command_line_error("launch", "--log-rank: must be ranks in 0.." + std::to_string(nproc - 1) +
                                             " separated by commas (e.g. 0 or 0,3), got '" + text + "'");
    ranks.push_back(std::stoi(item));
    start = comma + 1;
  }
  return ranks;
}

// Binds port 0 and reads back what the kernel chose. The port is free again
// once we close it, so another process could take it before rank 0's store
// binds it; torchrun has the same window. --master-port avoids it.
int pick_free_port() {
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  const bool ok = s >= 0 && bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int err = errno;
  if (s >= 0) close(s);
  if (!ok) throw std::runtime_error(std::string("cannot find a free port for MASTER_PORT: ") + std::strerror(err));
  return ntohs(addr.sin_port);
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// Writes all of `data`; a closed stdout/stderr loses the output, not the run.
void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// The launcher's single thread learns about SIGCHLD/SIGINT/SIGTERM through
// this self-pipe, which poll() watches next to the ranks' pipes.
int g_wake_fd = -1;

extern "C" void on_launcher_signal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = write(g_wake_fd, &byte, 1);
  errno = saved;
}

// What a rank's environment sets over the launcher's.
std::vector<std::string> rank_environment(const LaunchOptions& opts, int rank, int port) {
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const bool user_threads = omp && *omp;
  const std::string n = std::to_string(opts.nproc), r = std::to_string(rank);
  std::vector<std::string> env = {"RANK=" + r,          "LOCAL_RANK=" + r, "WORLD_SIZE=" + n, "LOCAL_WORLD_SIZE=" + n,
                                  "MASTER_ADDR=" + opts.master_addr, "MASTER_PORT=" + std::to_string(port)};
  // torchrun sets 1 and warns; ranks on one CPU machine are the whole point
  // here, so each gets its share of the cores instead.
  if (!user_threads) {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    env.push_back("OMP_NUM_THREADS=" + std::to_string(std::max(1, cores / opts.nproc)));
  }
  return env;
}

// One rank's output stream: a pipe read end and the line read so far.
struct Stream {
  int fd = -1;     // -1 once at EOF
  int out_fd = 1;  // where its lines go: our stdout or stderr
  std::string partial;
};

struct Rank {
  Child child;
  bool shown = true;  // --log-rank: lines of hidden ranks are read and dropped
  bool exited = false;
  int exit_code = 0;    // when it exited
  int exit_signal = 0;  // when a signal killed it
  bool explained = false;  // a `ctitan: ` line of its stderr is on ours (its own, or the same from another rank)
  Stream streams[2];    // stdout, stderr
};

// Watches the ranks of one process group from the launcher's single thread:
// poll() on the signal self-pipe and every rank pipe, exits seen through
// waitid(). Decides who stops whom and what the launcher reports.
class Supervisor {
 public:
  Supervisor(std::vector<Rank> ranks, int wake_fd)
      : ranks_(std::move(ranks)), wake_fd_(wake_fd), running_(static_cast<int>(ranks_.size())) {}

  // Runs until every rank has exited and its pipes are drained; reaps them
  // and returns the launcher's exit code after the one-line report.
  int run() {
    while (true) {
      if (running_ == 0 && !swept_) {
        // Whatever a rank left behind in the group (a background child) goes too.
        signal_ranks(SIGKILL);
        swept_ = true;
        drain_until_ = Clock::now() + kDrainPeriod;
      }
      std::vector<pollfd> fds{{wake_fd_, POLLIN, 0}};
      std::vector<std::pair<int, Stream*>> open;  // (rank, stream) per fds[1..]
      for (size_t r = 0; r < ranks_.size(); ++r)
        for (auto& s : ranks_[r].streams)
          if (s.fd >= 0) {
            fds.push_back({s.fd, POLLIN, 0});
            open.emplace_back(static_cast<int>(r), &s);
          }
      if (swept_ && (open.empty() || Clock::now() >= drain_until_)) break;
      if (poll(fds.data(), fds.size(), poll_timeout_ms()) < 0 && errno != EINTR)
        throw std::runtime_error(std::string("poll failed in the launcher: ") + std::strerror(errno));
      read_signals();
      for (size_t k = 1; k < fds.size(); ++k)
        if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) read_stream(open[k - 1].first, *open[k - 1].second);
      note_exits();
      if (stopping_ && !killed_ && running_ > 0 && Clock::now() >= kill_at_) kill_all();
    }
    for (auto& rank : ranks_) {
      rank.child.reap();
      for (auto& s : rank.streams)
        if (s.fd >= 0) close(s.fd);
    }
    return report();
  }

 private:
  int poll_timeout_ms() const {
    if (!swept_ && !(stopping_ && !killed_)) return -1;  // SIGCHLD wakes us
    const auto left = (swept_ ? drain_until_ : kill_at_) - Clock::now();
    return static_cast<int>(std::max<int64_t>(0, std::chrono::ceil<std::chrono::milliseconds>(left).count()));
  }

  // Every rank is in the first rank's process group.
  void signal_ranks(int sig) const { ranks_.front().child.signal_group(sig); }

  void stop_all(int others_running) {
    stopping_ = true;
    stopped_others_ = others_running;
    signal_ranks(SIGTERM);
    kill_at_ = Clock::now() + kGracePeriod;
  }

  void kill_all() {
    signal_ranks(SIGKILL);
    killed_ = true;
  }

  void read_signals() {
    unsigned char sigs[64];
    ssize_t got;
    while ((got = read(wake_fd_, sigs, sizeof(sigs))) > 0)
      for (ssize_t k = 0; k < got; ++k) {
        if (sigs[k] == SIGCHLD) continue;  // exits are looked at after every wake-up
        if (!stopping_) {
          stop_signal_ = sigs[k];
          stop_all(running_);
        } else if (!killed_) {
          kill_all();  // a second Ctrl-C does not wait out the grace period
        }
      }
  }

  void read_stream(int r, Stream& s) {
    char buf[65536];
    const ssize_t len = read(s.fd, buf, sizeof(buf));
    if (len < 0 && errno == EINTR) return;
    if (len > 0) s.partial.append(buf, static_cast<size_t>(len));
    emit_lines(r, s, len <= 0);
    if (len <= 0) {
      close(s.fd);
      s.fd = -1;
    }
  }

  // Passes on every complete line of `s.partial` (all of it at EOF) with the
  // rank prefix. Only this thread writes our stdout/stderr, and only whole
  // lines, so lines of different ranks never mix.
  void emit_lines(int r, Stream& s, bool eof) {
    const std::string prefix = "[rank" + std::to_string(r) + "]: ";
    std::string out;
    size_t start = 0;
    while (start < s.partial.size()) {
      size_t end = s.partial.find('\n', start);
      if (end == std::string::npos) {
        if (!eof && s.partial.size() - start < kMaxLineBytes) break;
        end = s.partial.size();
      }
      const std::string line = s.partial.substr(start, end - start);
      // A ctitan error or warning that another rank already printed word for
      // word (a bad data path, a config warning) is shown once, not once per rank.
      const bool ctitan_line = s.out_fd == STDERR_FILENO && line.rfind("ctitan: ", 0) == 0;
      const bool repeated = ctitan_line && err_seen_.count(line) > 0;
      if (ranks_[r].shown && !repeated) {
        out += prefix + line + "\n";
        if (ctitan_line) err_seen_.insert(line);
      }
      if (ctitan_line && (ranks_[r].shown || repeated)) ranks_[r].explained = true;
      start = end + 1;
    }
    s.partial.erase(0, std::min(start, s.partial.size()));
    write_all(s.out_fd, out);
  }

  // Exits are seen without reaping (Child::exited): a zombie rank keeps the
  // process group alive, so signal_ranks() can never reach a reused group id.
  void note_exits() {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      Rank& rank = ranks_[r];
      if (rank.exited) continue;
      const std::optional<ExitStatus> status = rank.child.exited();
      if (!status) continue;
      rank.exited = true;
      --running_;
      if (status->signal != 0) {
        rank.exit_signal = status->signal;
      } else {
        rank.exit_code = status->code;
      }
      if (!stopping_ && (rank.exit_code != 0 || rank.exit_signal != 0)) {
        failed_ = static_cast<int>(r);
        stop_all(running_);
      }
    }
  }

  int report() const {
    const auto ranks_word = [](int k) { return std::to_string(k) + (k == 1 ? " rank" : " ranks"); };
    if (stop_signal_ != 0) {
      write_all(2, "ctitan launch: received " + signal_name(stop_signal_) + "; stopped " + ranks_word(stopped_others_) +
                       "\n");
      return 128 + stop_signal_;
    }
    if (failed_ < 0) return 0;
    const Rank& rank = ranks_[failed_];
    // Bad input: the rank's one line says what and where; a launcher line
    // would be a second (and could name another rank than the one shown).
    if (rank.exit_code == kExitBadInput && rank.explained) return kExitBadInput;
    const std::string how = rank.exit_signal != 0 ? "was killed by signal " + std::to_string(rank.exit_signal) + " (" +
                                                        signal_name(rank.exit_signal) + ")"
                                                  : "exited with code " + std::to_string(rank.exit_code);
    const std::string others = stopped_others_ == 0 ? "" : "; stopped the other " + ranks_word(stopped_others_);
    write_all(2, "ctitan launch: rank " + std::to_string(failed_) + " (pid " + std::to_string(rank.child.pid) + ") " + how +
                     others + "\n");
    return rank.exit_signal != 0 ? 128 + rank.exit_signal : rank.exit_code;
  }

  std::vector<Rank> ranks_;
  std::set<std::string> err_seen_;  // ctitan: lines already on stderr
  const int wake_fd_;
  int running_;
  int failed_ = -1;         // the first rank that failed, if any
  int stop_signal_ = 0;     // the signal that stopped the launcher, if any
  int stopped_others_ = 0;  // ranks still running when we began to stop them
  bool stopping_ = false, killed_ = false, swept_ = false;
  Clock::time_point kill_at_{}, drain_until_{};
};

}  // namespace

std::string self_executable() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error(std::string("cannot resolve /proc/self/exe: ") + std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}


namespace {

// The launcher's flags; each takes a value.
constexpr const char* kLauncherFlags[] = {"--nproc", "--log-rank", "--master-addr", "--master-port"};

// Where the rank command starts: after `--`, at the first `--section.key`
// argument or at a path (an argument containing '/'); the launcher's flags
// before it all take a value. Returns (end of the launcher's flags, start of
// the rank command). A scan, not CLI11: the rank command is the trainer's
// arguments (is_config_key_arg, harness/cli.h, says why CLI11 does not own
// them) or another program's, and CLI11's prefix_command would stop at a
// path but not at a `--section.key`.
std::pair<size_t, size_t> rank_command_start(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") return {i, i + 1};
    if (a.find('/') != std::string::npos && a[0] != '-') return {i, i};  // a program path
    if (is_config_key_arg(a)) return {i, i};
    const bool takes_next =
        i + 1 < args.size() && args[i + 1] != "--" &&
        std::find(std::begin(kLauncherFlags), std::end(kLauncherFlags), a) != std::end(kLauncherFlags);
    if (takes_next) ++i;  // its value
  }
  return {args.size(), args.size()};
}

// `ctitan launch`'s flags and help.
struct LaunchCli {
  CLI::App app{"Starts N ranks on this machine with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,\n"
               "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Each rank runs `ctitan train <train args>`, or\n"
               "the program when the first argument is a path (contains '/').",
               "ctitan launch"};
  std::string log_ranks;

  explicit LaunchCli(LaunchOptions& opts) {
    app.add_option("--nproc", opts.nproc, "ranks to start, 1..64")->type_name("N")->required()->check(integer_in(1, kMaxRanks));
    app.add_option("--log-rank", log_ranks, "show only these ranks' output (default: every rank)")->type_name("R[,R..]");
    app.add_option("--master-addr", opts.master_addr, "rendezvous address (default 127.0.0.1)")
        ->type_name("A")
        ->check(CLI::Validator([](std::string& v) { return v.empty() ? std::string("needs a host name or address") : ""; }, ""));
    app.add_option("--master-port", opts.master_port, "rendezvous port (default: a free port)")
        ->type_name("P")
        ->check(integer_in(1, 65535));
    app.footer(
        "Form:\n"
        "  ctitan launch --nproc N [--log-rank R[,R..]] [--master-addr A] [--master-port P]\n"
        "                [--] <train args... | /path/to/program args...>\n"
        "The rank command starts after `--`, at the first --section.key argument or at a path.\n"
        "Output lines are prefixed \"[rankR]: \". OMP_NUM_THREADS, unless set, is cores / N.\n"
        "The first rank to fail stops the others (SIGTERM, SIGKILL after 5 s); the launcher\n"
        "exits with its code (128 + signal if it was killed).\n"
        "`ctitan train --nproc N <args>` is short for `ctitan launch --nproc N -- <args>`.");
  }
};

}  // namespace

LaunchOptions parse_launch_args(const std::vector<std::string>& args) {
  LaunchOptions opts;
  const auto [flags_end, command_start] = rank_command_start(args);
  LaunchCli cli(opts);
  parse_command_line(cli.app, {args.begin(), args.begin() + static_cast<std::ptrdiff_t>(flags_end)}, "launch");
  if (!cli.log_ranks.empty()) opts.log_ranks = parse_rank_list(cli.log_ranks, opts.nproc);
  const std::vector<std::string> rest(args.begin() + static_cast<std::ptrdiff_t>(command_start), args.end());
  if (!rest.empty() && rest[0].find('/') != std::string::npos) {
    if (access(rest[0].c_str(), X_OK) != 0)
      throw InputError("launch: rank program '" + rest[0] + "' is not an executable file");
    opts.command = rest;
  } else {
    opts.command = train_command(rest);
  }
  return opts;
}

std::vector<std::string> take_launcher_flags(std::vector<std::string>& train_args) {
  CLI::App app;
  std::vector<std::vector<std::string>> values(std::size(kLauncherFlags));
  for (size_t k = 0; k < values.size(); ++k) app.add_option(kLauncherFlags[k], values[k])->allow_extra_args(false);
  train_args = take_known_options(app, train_args, "launch");
  // As given, `--flag value` each (parse_launch_args parses them).
  std::vector<std::string> taken;
  std::map<const CLI::Option*, size_t> used;
  for (const CLI::Option* o : app.parse_order()) {
    taken.push_back(o->get_name());
    taken.push_back(o->results()[used[o]++]);
  }
  return taken;
}

std::vector<std::string> train_command(const std::vector<std::string>& train_args) {
  std::vector<std::string> cmd{self_executable(), "train"};
  cmd.insert(cmd.end(), train_args.begin(), train_args.end());
  return cmd;
}

int launch(const LaunchOptions& opts) {
  const int n = opts.nproc;
  const int port = opts.master_port > 0 ? opts.master_port : pick_free_port();

  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error(std::string("cannot create the launcher's signal pipe: ") + std::strerror(errno));
  g_wake_fd = wake[1];
  struct sigaction on_signal {};
  on_signal.sa_handler = on_launcher_signal;
  on_signal.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigemptyset(&on_signal.sa_mask);
  sigset_t ours, old_mask;
  sigemptyset(&ours);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM}) {
    sigaction(sig, &on_signal, nullptr);
    sigaddset(&ours, sig);
  }

  // Signals wait until every rank exists and sits in the group.
  sigprocmask(SIG_BLOCK, &ours, &old_mask);
  SpawnOptions spawn_opts;
  spawn_opts.argv = opts.command;
  spawn_opts.out = spawn_opts.err = Output::to_pipe();
  spawn_opts.group = 0;  // the first rank leads the group the others join
  spawn_opts.die_with_parent = true;
  spawn_opts.exec_failure_line = "ctitan launch: cannot execute '" + opts.command[0] + "'\n";
  spawn_opts.child_signal_mask = old_mask;
  std::vector<Rank> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    spawn_opts.env = rank_environment(opts, r, port);
    Rank& rank = ranks[r];
    try {
      rank.child = spawn(spawn_opts);
    } catch (const std::system_error& e) {
      if (r > 0) ranks.front().child.signal_group(SIGKILL);
      for (int k = 0; k < r; ++k) ranks[k].child.reap();
      sigprocmask(SIG_SETMASK, &old_mask, nullptr);
      throw std::runtime_error("cannot start rank " + std::to_string(r) + ": " + e.code().message());
    }
    spawn_opts.group = rank.child.group;
    rank.shown =
        opts.log_ranks.empty() || std::find(opts.log_ranks.begin(), opts.log_ranks.end(), r) != opts.log_ranks.end();
    rank.streams[0] = Stream{rank.child.out, 1, {}};
    rank.streams[1] = Stream{rank.child.err, 2, {}};
  }
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);

  const int code = Supervisor(std::move(ranks), wake[0]).run();
  g_wake_fd = -1;
  close(wake[0]);
  close(wake[1]);
  return code;
}

}  // namespace ctitan
