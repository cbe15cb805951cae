// A real one-node Slurm cluster for the `slurm` tests: munged, slurmctld and
// slurmd from Debian's packages (slurmctld, slurmd, slurm-client, munge),
// started in the foreground as children of the test process in a temporary
// folder, on loopback ports picked free, as root. Nothing is installed and
// nothing outside the folder is touched: the daemons find their files
// through the generated slurm.conf, the clients (sbatch, srun, squeue, ...)
// through SLURM_CONF, which start() sets for this process and its children.
//
// The daemons are stopped by pid (SIGTERM, then SIGKILL) in stop() and the
// destructor, whatever the outcome; each also has PR_SET_PDEATHSIG, so a
// test process that crashes takes them with it. Jobs still in the queue are
// cancelled first, so no job's processes outlive the cluster.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/process.h"

namespace ctitan::testing {

namespace slurm_detail {
namespace fs = std::filesystem;

inline std::optional<std::string> find_program(const std::string& name) {
  for (const char* dir : {"/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin"}) {
    const fs::path p = fs::path(dir) / name;
    if (access(p.c_str(), X_OK) == 0) return p.string();
  }
  return std::nullopt;
}

// A TCP port nobody listens on now (bound to port 0, then released).
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("cannot find a free loopback port");
  const int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// 1000..40999, so that jobs of clusters started side by side get
// different ids (the trainer derives MASTER_PORT from the job id).
inline int first_job_id() {
  std::random_device rd;
  return 1000 + static_cast<int>(rd() % 40000);
}

inline std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}
}  // namespace slurm_detail

class SlurmCluster {
 public:
  // "" when the cluster can run here; else why not, in one line.
  static std::string unavailable() {
    for (const char* p : {"munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol", "scancel"})
      if (!slurm_detail::find_program(p))
        return std::string(p) + " is not installed (Debian: slurmctld slurmd slurm-client munge; scripts/bootstrap.sh "
                                "installs them)";
    if (geteuid() != 0) return "the test cluster's daemons run as root and this test does not";
    return "";
  }

  // The cluster's files go in a short folder of its own under /tmp (Slurm's
  // Unix socket paths must stay under 108 bytes); `link` (a test's folder)
  // becomes a symbolic link to it, so the daemons' logs are found beside the
  // test's other files.
  explicit SlurmCluster(const std::filesystem::path& link) {
    char tmpl[] = "/tmp/ctsl.XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("cannot create a folder under /tmp for the test Slurm cluster");
    dir_ = tmpl;
    std::error_code ec;
    std::filesystem::remove_all(link, ec);
    std::filesystem::create_directories(link.parent_path(), ec);
    std::filesystem::create_directory_symlink(dir_, link, ec);
  }
  // The cluster's folder goes with it unless a test failed (then the link
  // in the test's folder, kept with it, leads to the daemons' logs).
  ~SlurmCluster() {
    stop();
    std::error_code ec;
    if (::testing::UnitTest::GetInstance()->Passed()) std::filesystem::remove_all(dir_, ec);
  }
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // Writes the configuration, starts the daemons and waits until the node
  // is idle. Throws (with the daemons' logs named) when it does not come up.
  void start(int cpus = 8) {
    namespace fs = std::filesystem;
    fs::create_directories(dir_ / "state");
    fs::create_directories(dir_ / "spool");
    {
      std::random_device rd;
      std::ofstream key(dir_ / "munge.key", std::ios::binary);
      for (int i = 0; i < 1024; ++i) key.put(static_cast<char>(rd() & 0xff));
    }
    chmod((dir_ / "munge.key").c_str(), 0600);
    std::ofstream(dir_ / "munge.seed").close();
    chmod((dir_ / "munge.seed").c_str(), 0600);
    node_ = slurm_detail::host_name();
    const std::string d = dir_.string();
    std::ofstream conf(dir_ / "slurm.conf");
    conf << "ClusterName=ctitantest\n"
         << "SlurmctldHost=" << node_ << "(127.0.0.1)\n"
         << "SlurmctldPort=" << slurm_detail::free_port() << "\n"
         << "SlurmdPort=" << slurm_detail::free_port() << "\n"
         << "SlurmUser=root\nSlurmdUser=root\n"
         << "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" << d << "/munge.sock\n"
         << "StateSaveLocation=" << d << "/state\nSlurmdSpoolDir=" << d << "/spool\n"
         << "SlurmctldPidFile=" << d << "/slurmctld.pid\nSlurmdPidFile=" << d << "/slurmd.pid\n"
         << "SlurmctldLogFile=" << d << "/slurmctld.log\nSlurmdLogFile=" << d << "/slurmd.log\n"
         << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
         << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
         << "AccountingStorageType=accounting_storage/none\nJobAcctGatherType=jobacct_gather/none\n"
         << "JobCompType=jobcomp/none\nMpiDefault=none\nReturnToService=2\n"
         << "SlurmdParameters=config_overrides\n"
         // Quick time-limit kills and a short grace for the tests.
         << "KillWait=2\nOverTimeLimit=0\nMinJobAge=600\n"
         // Job ids from a random start: two clusters of concurrent tests
         // (ctest -j) then derive different MASTER_PORTs for their jobs.
         << "FirstJobId=" << slurm_detail::first_job_id() << "\n"
         << "NodeName=" << node_ << " NodeAddr=127.0.0.1 CPUs=" << cpus << " RealMemory=8000 State=UNKNOWN\n"
         << "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
    conf.close();
    ::setenv("SLURM_CONF", (dir_ / "slurm.conf").c_str(), 1);

    munged_ = spawn({*slurm_detail::find_program("munged"), "-F", "--force", "--key-file=" + d + "/munge.key",
                     "--socket=" + d + "/munge.sock", "--pid-file=" + d + "/munged.pid",
                     "--log-file=" + d + "/munged.log", "--seed-file=" + d + "/munge.seed"},
                    "munged.out");
    wait_for([&] { return std::filesystem::exists(dir_ / "munge.sock"); }, "munged", "munged.out");
    slurmctld_ = spawn({*slurm_detail::find_program("slurmctld"), "-D", "-i"}, "slurmctld.out");
    slurmd_ = spawn({*slurm_detail::find_program("slurmd"), "-D"}, "slurmd.out");
    wait_for(
        [&] {
          const auto r = run_program({*slurm_detail::find_program("sinfo"), "-h", "-o", "%T"});
          return r.exit_code == 0 && r.out.find("idle") != std::string::npos;
        },
        "the node (sinfo never showed it idle)", "slurmctld.log");
  }

  // Cancels every job, waits (up to 20 s) for the queue to empty, then stops
  // the daemons by pid: SIGTERM, SIGKILL after 5 s. Safe to call twice.
  void stop() {
    if (slurmctld_ > 0) {
      if (const auto scancel = slurm_detail::find_program("scancel")) run_program({*scancel, "--full", "--user=root"});
      const auto squeue = slurm_detail::find_program("squeue");
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (squeue && std::chrono::steady_clock::now() < until) {
        const auto r = run_program({*squeue, "-h", "-o", "%i"});
        if (r.exit_code != 0 || r.out.empty()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
    }
    for (pid_t* pid : {&slurmd_, &slurmctld_, &munged_}) {
      if (*pid <= 0) continue;
      kill(*pid, SIGTERM);
      bool gone = false;
      for (int i = 0; i < 50 && !gone; ++i) {
        gone = waitpid(*pid, nullptr, WNOHANG) == *pid;
        if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (!gone) {
        kill(*pid, SIGKILL);
        waitpid(*pid, nullptr, 0);
      }
      *pid = -1;
    }
  }

  // Stops only the controller (for "the controller does not answer").
  void stop_controller() {
    if (slurmctld_ <= 0) return;
    kill(slurmctld_, SIGKILL);
    waitpid(slurmctld_, nullptr, 0);
    slurmctld_ = -1;
  }

  const std::filesystem::path& dir() const { return dir_; }
  std::string conf() const { return (dir_ / "slurm.conf").string(); }
  const std::string& node() const { return node_; }
  // A Slurm client command, by argv (no shell).
  ProcessResult client(const std::string& program, std::vector<std::string> args) const {
    args.insert(args.begin(), *slurm_detail::find_program(program));
    return run_program(args);
  }

 private:
  pid_t spawn(const std::vector<std::string>& argv, const std::string& log) {
    const std::string log_path = (dir_ / log).string();
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
      setpgid(0, 0);  // not in the test's group: a Ctrl-C of ctest reaches them via PDEATHSIG only
      const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int null_fd = open("/dev/null", O_RDONLY);
      dup2(null_fd, 0);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<std::string> args = argv;
      std::vector<char*> c;
      for (auto& a : args) c.push_back(a.data());
      c.push_back(nullptr);
      execv(c[0], c.data());
      _exit(127);
    }
    if (pid < 0) throw std::runtime_error("fork failed");
    return pid;
  }

  template <class Ready>
  void wait_for(Ready ready, const std::string& what, const std::string& log) {
    for (int i = 0; i < 150; ++i) {
      if (ready()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::ifstream in(dir_ / log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.size() > 2000) text = text.substr(text.size() - 2000);
    throw std::runtime_error("the test Slurm cluster did not come up: " + what + "; " + (dir_ / log).string() +
                             ":\n" + text);
  }

  std::filesystem::path dir_;
  std::string node_;
  pid_t munged_ = -1, slurmctld_ = -1, slurmd_ = -1;
};

}  // namespace ctitan::testing
