#include "trainer/parallel/exposed_comm.h"

#include <chrono>
#include <mutex>
#include <unordered_map>

namespace ctitan {
namespace {

std::mutex g_exposed_mutex;
std::unordered_map<const Communicator*, double> g_exposed_s;

}  // namespace

void wait_exposed(const WorkPtr& w, Communicator& g) {
  const auto t0 = std::chrono::steady_clock::now();
  w->wait();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(g_exposed_mutex);
  g_exposed_s[&g] += s;
}

double take_exposed_seconds(const Communicator& g) {
  std::lock_guard<std::mutex> lock(g_exposed_mutex);
  const auto it = g_exposed_s.find(&g);
  if (it == g_exposed_s.end()) return 0;
  const double s = it->second;
  it->second = 0;
  return s;
}

}  // namespace ctitan
