#pragma once
// A `troupe serve` (or `troupe worker`) child process for end-to-end tests:
// started with arguments, ready once its stderr says it is listening,
// stopped with SIGTERM (or killed) when the test is done.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace troupe::test {

class ChildProcess {
 public:
  // Runs argv with stdout and stderr to `log`; waits for `ready` to appear in it.
  ChildProcess(std::vector<std::string> argv, const std::string& log, const std::string& ready = "",
               std::chrono::seconds timeout = std::chrono::seconds(60))
      : log_(log) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    const int rc = posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw std::runtime_error("cannot start " + argv[0]);
    if (ready.empty()) return;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (output().find(ready) != std::string::npos) return;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error(argv[0] + " exited before it was ready: " + output());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error(argv[0] + " not ready in time: " + output());
  }
  ~ChildProcess() { stop(SIGTERM); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  std::string output() const {
    std::ifstream f(log_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  // Sends `sig` and waits for the exit; returns the wait status.
  int stop(int sig) {
    if (pid_ <= 0) return 0;
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  pid_t pid() const { return pid_; }
  // Waits for the process to exit by itself; its wait status, or -1 if it
  // still runs after `within`.
  int wait_exit(std::chrono::milliseconds within) {
    const auto until = std::chrono::steady_clock::now() + within;
    while (pid_ > 0) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      if (std::chrono::steady_clock::now() >= until) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
};

inline std::string troupe_binary() { return TROUPE_BINARY; }

// The store of the server on an ipc endpoint: beside its socket (a store is
// locked by one process, so each server has its own).
inline std::string endpoint_data_dir(const std::string& endpoint) { return endpoint.substr(6) + ".data"; }

// Paths removed when the test process exits.
struct RemovedAtExit {
  std::vector<std::string> paths;
  ~RemovedAtExit() {
    std::error_code ignored;
    for (const auto& p : paths) std::filesystem::remove_all(p, ignored);
  }
};

// A fresh ipc endpoint in the temp directory (no port to collide on). Its
// name holds this process's pid, which the system hands out again once pids
// wrap: whatever an earlier test process of that pid left under the name
// (its sockets, its store and the sessions in it) would become this test's.
// So those are removed first, and this process removes its own at exit.
inline std::string ipc_endpoint(const std::string& tag) {
  static int n = 0;
  static RemovedAtExit files;
  const std::string endpoint =
      "ipc://" + (std::filesystem::temp_directory_path() /
                  ("troupe-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(++n) + ".sock"))
                     .string();
  // Its socket, the job events' socket a server puts beside it, its store.
  for (const std::string& p : {endpoint.substr(6), endpoint.substr(6) + ".events", endpoint_data_dir(endpoint)}) {
    std::filesystem::remove_all(p);
    files.paths.push_back(p);
  }
  return endpoint;
}

}  // namespace troupe::test
