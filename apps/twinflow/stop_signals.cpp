// SIGTERM and SIGINT: stop after the current step, or at once on the second one.
#include "apps/twinflow/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <stdexcept>

namespace tf::app {

namespace {

volatile sig_atomic_t g_stop_signal = 0;  // the first signal, 0 until one arrives
const char* g_announce = "";              // written on the first signal
size_t g_announce_bytes = 0;
std::atomic<bool> g_installed{false};
struct sigaction g_old_term, g_old_int;

void say(const char* text, size_t n) { (void)!::write(STDERR_FILENO, text, n); }

// Async-signal-safe: a flag, write(2), _exit(2).
extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    static const char kNow[] = "\ntwinflow: second stop signal: exiting now, without saving\n";
    say(kNow, sizeof kNow - 1);
    ::_exit(128 + sig);
  }
  g_stop_signal = sig;
  say(g_announce, g_announce_bytes);
}

}  // namespace

StopSignals::StopSignals(const char* announce) {
  if (g_installed.exchange(true)) throw std::logic_error("StopSignals: only one instance at a time");
  g_stop_signal = 0;
  g_announce = announce;
  g_announce_bytes = std::strlen(announce);
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // interrupted reads and writes go on
  ::sigaction(SIGTERM, &sa, &g_old_term);
  ::sigaction(SIGINT, &sa, &g_old_int);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  ::sigaction(SIGINT, &g_old_int, nullptr);
  g_installed = false;
}

bool StopSignals::requested() const { return g_stop_signal != 0; }
int StopSignals::signal() const { return int(g_stop_signal); }

}  // namespace tf::app
