#pragma once
// RocksDB's info log (the data directory's LOG) written by troupe, not by
// RocksDB's own logger. RocksDB's logger writes through a file writer that,
// once a write failed (a full disk), must never be written again: the next
// line, which RocksDB writes to report that very error, trips an assertion in
// Debian's build (docs/DECISIONS.md, "Storage errors"). This one drops a line
// it cannot write and goes on; it keeps LOG and LOG.old under kMaxBytes each
// (1 MiB in all: part of what a capped store may take).
// Included by store.cpp only (RocksDB headers are heavy).
#include <rocksdb/env.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace troupe::persistence {

class StoreLog : public rocksdb::Logger {
 public:
  static constexpr int64_t kMaxBytes = 512 << 10;

  explicit StoreLog(std::string dir, rocksdb::InfoLogLevel level = rocksdb::InfoLogLevel::INFO_LEVEL);
  ~StoreLog() override;

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override;
  size_t GetLogFileSize() const override;
  int64_t dropped_lines() const { return dropped_.load(); }

 private:
  rocksdb::Status CloseImpl() override;
  void open_locked();  // with mutex_ held

  std::string path_;
  mutable std::mutex mutex_;
  int fd_ = -1;
  int64_t bytes_ = 0;
  std::atomic<int64_t> dropped_ = 0;
};

}  // namespace troupe::persistence
