#pragma once
// A store directory of the persistence tests' own, removed with it: unique
// per process, tag and instance, so tests run in parallel never share one.
#include <unistd.h>

#include <filesystem>
#include <string>

namespace troupe::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag = "store") {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("troupe-store-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(++n));
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace troupe::test
