#pragma once
// A RocksDB FileSystem for storage-error tests: a disk that fills up and
// one that fails at random. Files are real (under the store's directory);
// the wrapper decides, for each mutating call, whether it succeeds:
//
//   capacity   the disk's size in bytes: an append that would take the
//              files under `root` past it lands what fits and fails with
//              ENOSPC (IOStatus::NoSpace), as write(2) does on a full disk.
//              Deleting files gives the space back. 0: no limit.
//   faults     with probability `rate`, a call of one of the chosen kinds
//              fails instead, with ENOSPC or EIO (an append lands a random
//              prefix first). Seeded: a failing run replays.
//
// Syncs are recorded, not passed down (the real disk's fsyncs would only
// slow the test; power loss is power_loss.test.cpp's subject).
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>

namespace troupe::test {

class FaultyDiskFs : public rocksdb::FileSystemWrapper {
 public:
  // What may fail: an append (WAL, table or MANIFEST bytes), a file's sync or
  // fsync, creating, renaming or deleting a file, a directory's fsync.
  enum Op : unsigned { append = 1, sync = 2, create = 4, rename = 8, remove = 16, dir_sync = 32, all_ops = 63 };

  struct Counts {
    int64_t no_space = 0, io_errors = 0, calls = 0;
  };

  FaultyDiskFs(std::filesystem::path root, uint64_t seed);

  const char* Name() const override { return "FaultyDiskFs"; }

  void set_capacity(uint64_t bytes) { capacity_ = bytes; }
  // Random faults on the calls in `ops` (an Op mask), each with probability `rate`.
  void set_faults(unsigned ops, double rate);
  void stop_faults() { set_faults(0, 0); }
  // Bytes the files under root take now.
  uint64_t used() const;
  Counts counts() const;

  // For the file wrappers (faulty_disk_fs.cpp): what the next call of `op`
  // gets; for an append of `bytes`, `fits` is how many land before it fails.
  rocksdb::IOStatus decide(Op op, uint64_t bytes = 0, uint64_t* fits = nullptr);

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result, rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(const std::string& name, const std::string& old_name,
                                      const rocksdb::FileOptions& options, std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& options,
                                 std::unique_ptr<rocksdb::FSDirectory>* result, rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& name, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& from, const std::string& to, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;

 private:
  std::filesystem::path root_;
  std::atomic<uint64_t> capacity_ = 0;
  mutable std::mutex mutex_;
  std::mt19937_64 rng_;
  unsigned fault_ops_ = 0;
  double fault_rate_ = 0;
  Counts counts_;
};

}  // namespace troupe::test
