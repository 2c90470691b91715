#include "tests/persistence/faulty_disk_fs.h"

#include "tests/persistence/fault_injection_fs.h"

#include <system_error>

namespace troupe::test {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;
namespace fs = std::filesystem;

class FaultyFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultyFile(FaultyDiskFs& owner, std::unique_ptr<rocksdb::FSWritableFile> file)
      : FSWritableFileOwnerWrapper(std::move(file)), fs_(owner) {}

  IOStatus Append(const Slice& data, const IOOptions& options, IODebugContext* dbg) override {
    uint64_t fits = 0;
    IOStatus s = fs_.decide(FaultyDiskFs::append, data.size(), &fits);
    if (fits > 0) {
      IOStatus w = target()->Append(Slice(data.data(), fits), options, dbg);
      if (!w.ok()) return w;
    }
    return s;
  }
  IOStatus Append(const Slice& data, const IOOptions& options, const rocksdb::DataVerificationInfo&,
                  IODebugContext* dbg) override {
    return Append(data, options, dbg);
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& options, IODebugContext* dbg) override {
    uint64_t fits = 0;
    IOStatus s = fs_.decide(FaultyDiskFs::append, data.size(), &fits);
    if (fits > 0) {
      IOStatus w = target()->PositionedAppend(Slice(data.data(), fits), offset, options, dbg);
      if (!w.ok()) return w;
    }
    return s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& options,
                            const rocksdb::DataVerificationInfo&, IODebugContext* dbg) override {
    return PositionedAppend(data, offset, options, dbg);
  }
  IOStatus Sync(const IOOptions&, IODebugContext*) override { return fs_.decide(FaultyDiskFs::sync); }
  IOStatus Fsync(const IOOptions&, IODebugContext*) override { return fs_.decide(FaultyDiskFs::sync); }
  IOStatus RangeSync(uint64_t, uint64_t, const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }

 private:
  FaultyDiskFs& fs_;
};

class FaultyDir final : public rocksdb::FSDirectoryWrapper {
 public:
  FaultyDir(FaultyDiskFs& owner, std::unique_ptr<rocksdb::FSDirectory> dir) : FSDirectoryWrapper(std::move(dir)), fs_(owner) {}
  IOStatus Fsync(const IOOptions&, IODebugContext*) override { return fs_.decide(FaultyDiskFs::dir_sync); }
  IOStatus FsyncWithDirOptions(const IOOptions&, IODebugContext*, const rocksdb::DirFsyncOptions&) override {
    return fs_.decide(FaultyDiskFs::dir_sync);
  }

 private:
  FaultyDiskFs& fs_;
};

}  // namespace

FaultyDiskFs::FaultyDiskFs(std::filesystem::path root, uint64_t seed)
    : FileSystemWrapper(rocksdb::FileSystem::Default()), root_(std::move(root)), rng_(seed) {}

void FaultyDiskFs::set_faults(unsigned ops, double rate) {
  std::lock_guard lock(mutex_);
  fault_ops_ = ops;
  fault_rate_ = rate;
}

uint64_t FaultyDiskFs::used() const {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root_, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const uint64_t n = it->file_size(size_ec);
      if (!size_ec) total += n;
    }
  }
  return total;
}

FaultyDiskFs::Counts FaultyDiskFs::counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

IOStatus FaultyDiskFs::decide(Op op, uint64_t bytes, uint64_t* fits) {
  if (fits) *fits = bytes;
  std::lock_guard lock(mutex_);
  ++counts_.calls;
  if ((fault_ops_ & op) && std::uniform_real_distribution<double>(0, 1)(rng_) < fault_rate_) {
    if (fits) *fits = bytes == 0 ? 0 : rng_() % bytes;
    if (rng_() % 2 == 0) {
      ++counts_.no_space;
      return IOStatus::NoSpace("injected ENOSPC (FaultyDiskFs)");
    }
    ++counts_.io_errors;
    return IOStatus::IOError("injected EIO (FaultyDiskFs)");
  }
  const uint64_t cap = capacity_.load();
  if (op == append && cap > 0) {
    const uint64_t now = used();
    if (now + bytes > cap) {
      if (fits) *fits = now >= cap ? 0 : cap - now;
      ++counts_.no_space;
      return IOStatus::NoSpace("No space left on device (FaultyDiskFs: " + std::to_string(cap) + " bytes)");
    }
  }
  return IOStatus::OK();
}

IOStatus FaultyDiskFs::NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) {
  if (IOStatus s = decide(create); !s.ok()) return s;
  std::unique_ptr<rocksdb::FSWritableFile> file;
  IOStatus s = target()->NewWritableFile(name, without_fallocate(options), &file, dbg);
  if (s.ok()) *result = std::make_unique<FaultyFile>(*this, std::move(file));
  return s;
}

IOStatus FaultyDiskFs::ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                          std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) {
  if (IOStatus s = decide(create); !s.ok()) return s;
  std::unique_ptr<rocksdb::FSWritableFile> file;
  IOStatus s = target()->ReopenWritableFile(name, without_fallocate(options), &file, dbg);
  if (s.ok()) *result = std::make_unique<FaultyFile>(*this, std::move(file));
  return s;
}

IOStatus FaultyDiskFs::ReuseWritableFile(const std::string&, const std::string&, const rocksdb::FileOptions&,
                                         std::unique_ptr<rocksdb::FSWritableFile>*, IODebugContext*) {
  return IOStatus::NotSupported("FaultyDiskFs does not model recycled files");
}

IOStatus FaultyDiskFs::NewDirectory(const std::string& name, const IOOptions& options,
                                    std::unique_ptr<rocksdb::FSDirectory>* result, IODebugContext* dbg) {
  std::unique_ptr<rocksdb::FSDirectory> dir;
  IOStatus s = target()->NewDirectory(name, options, &dir, dbg);
  if (s.ok()) *result = std::make_unique<FaultyDir>(*this, std::move(dir));
  return s;
}

IOStatus FaultyDiskFs::DeleteFile(const std::string& name, const IOOptions& options, IODebugContext* dbg) {
  if (IOStatus s = decide(remove); !s.ok()) return s;
  return target()->DeleteFile(name, options, dbg);
}

IOStatus FaultyDiskFs::RenameFile(const std::string& from, const std::string& to, const IOOptions& options,
                                  IODebugContext* dbg) {
  if (IOStatus s = decide(rename); !s.ok()) return s;
  return target()->RenameFile(from, to, options, dbg);
}

}  // namespace troupe::test
