#pragma once
// A RocksDB FileSystem for power-loss tests. Every write goes through to the
// real files at once (RocksDB reads back what it wrote, as from the page
// cache), while the wrapper remembers what a disk would keep if power went
// out now:
//
//   file data      the size at each file's last Sync/Fsync; bytes appended
//                  after it are lost (Tail::dropped), or none, all or a
//                  random prefix of them survive (Tail::random_prefix: the
//                  kernel may have written some back)
//   dir entries    files created, renamed or deleted since their directory's
//                  last fsync: the creation, the rename and the delete are
//                  undone (deleted files and overwritten rename targets are
//                  kept aside in `shadow` until the directory is fsynced)
//
// cut_power() (now) or cut_power_at(n) (at the n-th mutating call from now,
// which then half-happens: an Append lands a prefix and fails) make every
// later mutating call fail with an IOError, as a dead disk would. Once the
// Store is closed, restore() rewrites the files to what survived.
//
// Not modelled: reordered or torn writes inside the synced part, a disk that
// lies about file fsyncs (directory fsyncs can be lost on purpose, as a
// negative control), directories themselves (created ones are durable), the
// info LOG (RocksDB writes it with its own file object, untracked), hard
// links, random-access writes, recycled WAL files (refused, not used by the
// store's options).
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace troupe::test {

class PowerLossFs : public rocksdb::FileSystemWrapper {
 public:
  // What survives of the bytes written after a file's last sync.
  enum class Tail { dropped, random_prefix };

  // What restore() took away.
  struct Losses {
    int64_t files_cut = 0, bytes_dropped = 0, files_removed = 0, renames_undone = 0, deletes_undone = 0;
  };

  // `shadow`: an empty directory outside the store, on the same file system.
  PowerLossFs(std::filesystem::path shadow, uint64_t seed, Tail tail = Tail::dropped);

  const char* Name() const override { return "PowerLossFs"; }

  void cut_power();
  // 1: the next mutating call; 0: never.
  void cut_power_at(uint64_t n);
  bool powered() const;
  // Mutating calls so far (Append, Sync, Fsync, create, rename, delete, truncate, directory fsync).
  uint64_t mutations() const;
  // A disk that acknowledges directory fsyncs and keeps nothing of them (a
  // negative control: the directory entries are then never durable).
  void lose_directory_fsyncs() { lose_directory_fsyncs_ = true; }
  // With no store open: the files as the disk would have kept them. Power is
  // on again afterwards, with nothing pending.
  Losses restore();

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result, rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(const std::string& name, const std::string& old_name,
                                      const rocksdb::FileOptions& options, std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomRWFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* result, rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& options,
                                 std::unique_ptr<rocksdb::FSDirectory>* result, rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& name, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& from, const std::string& to, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus LinkFile(const std::string& from, const std::string& to, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus Truncate(const std::string& name, size_t size, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override;

  // For the file and directory wrappers (fault_injection_fs.cpp).
  struct FileState {
    uint64_t size = 0;    // bytes written
    uint64_t synced = 0;  // bytes a sync made durable
  };
  enum class Admit { yes, no, last };  // last: the call that power goes off in
  Admit admit();
  std::mutex& mutex() { return mutex_; }
  uint64_t random_below(uint64_t n);  // with mutex() held
  void directory_synced(const std::string& dir);

 private:
  struct Change {
    enum Kind { created, renamed, deleted } kind;
    std::string path;  // created, deleted, or the rename's target
    std::string from;  // a rename's source
    std::string kept;  // in shadow: the deleted file, or the target a rename replaced
  };
  std::string set_aside(const std::string& path);  // with mutex_ held
  std::shared_ptr<FileState> track(const std::string& path, bool fresh, bool existed);

  std::filesystem::path shadow_;
  Tail tail_;
  mutable std::mutex mutex_;
  std::mt19937_64 rng_;
  bool powered_ = true, lose_directory_fsyncs_ = false;
  uint64_t mutations_ = 0, cut_at_ = 0;
  uint64_t kept_ = 0;                                          // names in shadow
  std::map<std::string, std::shared_ptr<FileState>> files_;   // by current path
  std::vector<Change> changes_;                                // not yet made durable by a directory fsync
};

// `options` with preallocation off: it changes no file's size, only a test's
// speed (a WAL preallocates tens of MiB, which tmpfs would really allocate).
rocksdb::FileOptions without_fallocate(const rocksdb::FileOptions& options);

// An Env whose files go through `fs` (threads and clock: the default Env's).
std::unique_ptr<rocksdb::Env> env_on(const std::shared_ptr<rocksdb::FileSystem>& fs);

}  // namespace troupe::test
