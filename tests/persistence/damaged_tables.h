#pragma once
// What the job and store-check tests share: a store of many one-item jobs in
// table files, and a table file with bytes overwritten (a damaged block).
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "persistence/jobs.h"
#include "persistence/store.h"

namespace troupe::test {

// `n` jobs of one item each, flushed into SST files by closing the store.
inline void store_jobs(const std::filesystem::path& dir, int n) {
  persistence::Store store(dir);
  persistence::JobBook book(store);
  for (int i = 0; i < n; ++i) {
    persistence::JobRecord j;
    char id[32];
    std::snprintf(id, sizeof id, "job-%04d", i);
    j.id = id;
    j.item_template = "Summarize: {item}";
    j.items = {"paper " + std::to_string(i) + ": " + std::string(300, static_cast<char>('a' + i % 26))};
    book.create(j);
  }
}

// Overwrites bytes at `fraction` of the way into the largest table file.
inline void damage_table(const std::filesystem::path& dir, double fraction) {
  std::filesystem::path largest;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".sst" && (largest.empty() || e.file_size() > std::filesystem::file_size(largest)))
      largest = e.path();
  REQUIRE_FALSE(largest.empty());
  std::fstream f(largest, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(static_cast<double>(std::filesystem::file_size(largest)) * fraction));
  const std::string junk(64, '\x5a');
  f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
}

}  // namespace troupe::test
