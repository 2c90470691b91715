#include "tests/persistence/fault_injection_fs.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <system_error>

namespace troupe::test {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;
namespace fs = std::filesystem;

IOStatus power_off() { return IOStatus::IOError("power is off (PowerLossFs)"); }

// RocksDB names one file by several spellings ("dir//000004.log", "dir/./x").
std::string normal(const std::string& path) {
  std::string s = fs::path(path).lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

std::string parent_of(const std::string& normal_path) { return fs::path(normal_path).parent_path().string(); }

bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

class TrackedFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  TrackedFile(PowerLossFs& owner, std::shared_ptr<PowerLossFs::FileState> state, std::unique_ptr<rocksdb::FSWritableFile> file)
      : FSWritableFileOwnerWrapper(std::move(file)), fs_(owner), state_(std::move(state)) {}

  IOStatus Append(const Slice& data, const IOOptions& options, IODebugContext* dbg) override {
    return append(data, std::nullopt, [&](const Slice& d) { return target()->Append(d, options, dbg); });
  }
  // Checksum hand-off is for storage that verifies it; a torn append could not carry it anyway.
  IOStatus Append(const Slice& data, const IOOptions& options, const rocksdb::DataVerificationInfo&,
                  IODebugContext* dbg) override {
    return Append(data, options, dbg);
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& options, IODebugContext* dbg) override {
    return append(data, offset, [&](const Slice& d) { return target()->PositionedAppend(d, offset, options, dbg); });
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& options,
                            const rocksdb::DataVerificationInfo&, IODebugContext* dbg) override {
    return PositionedAppend(data, offset, options, dbg);
  }
  IOStatus Truncate(uint64_t size, const IOOptions& options, IODebugContext* dbg) override {
    if (fs_.admit() != PowerLossFs::Admit::yes) return power_off();
    IOStatus s = target()->Truncate(size, options, dbg);
    if (s.ok()) {
      std::lock_guard lock(fs_.mutex());
      state_->size = size;
      state_->synced = std::min(state_->synced, size);
    }
    return s;
  }
  IOStatus Sync(const IOOptions&, IODebugContext*) override { return sync(); }
  IOStatus Fsync(const IOOptions&, IODebugContext*) override { return sync(); }
  // sync_file_range starts write-back and promises nothing: not a sync here.
  IOStatus RangeSync(uint64_t offset, uint64_t n, const IOOptions& options, IODebugContext* dbg) override {
    if (!fs_.powered()) return power_off();
    return target()->RangeSync(offset, n, options, dbg);
  }
  IOStatus Flush(const IOOptions& options, IODebugContext* dbg) override {
    if (!fs_.powered()) return power_off();
    return target()->Flush(options, dbg);
  }
  // The descriptor is released even with the power off (the test process
  // lives on); closing syncs nothing.
  IOStatus Close(const IOOptions& options, IODebugContext* dbg) override {
    const bool on = fs_.powered();
    IOStatus s = target()->Close(options, dbg);
    return on ? s : power_off();
  }

 private:
  // `at`: where a positioned append writes; none, at the end.
  IOStatus append(const Slice& data, std::optional<uint64_t> at, const std::function<IOStatus(const Slice&)>& write) {
    switch (fs_.admit()) {
      case PowerLossFs::Admit::no: return power_off();
      case PowerLossFs::Admit::last: {
        size_t part = 0;
        {
          std::lock_guard lock(fs_.mutex());
          part = static_cast<size_t>(fs_.random_below(data.size()));
        }
        if (part > 0 && write(Slice(data.data(), part)).ok()) grow(at, part);
        return power_off();
      }
      case PowerLossFs::Admit::yes: break;
    }
    IOStatus s = write(data);
    if (s.ok()) grow(at, data.size());
    return s;
  }

  void grow(std::optional<uint64_t> at, uint64_t n) {
    std::lock_guard lock(fs_.mutex());
    state_->size = at ? std::max(state_->size, *at + n) : state_->size + n;
  }

  // Recorded, not passed down: the model decides what survives a cut, and
  // the real disk's fsyncs would only make the test slow.
  IOStatus sync() {
    if (fs_.admit() != PowerLossFs::Admit::yes) return power_off();
    std::lock_guard lock(fs_.mutex());
    state_->synced = std::max(state_->synced, state_->size);
    return IOStatus::OK();
  }

  PowerLossFs& fs_;
  std::shared_ptr<PowerLossFs::FileState> state_;
};

class TrackedDir final : public rocksdb::FSDirectoryWrapper {
 public:
  TrackedDir(PowerLossFs& owner, std::string path, std::unique_ptr<rocksdb::FSDirectory> dir)
      : FSDirectoryWrapper(std::move(dir)), fs_(owner), path_(std::move(path)) {}

  IOStatus Fsync(const IOOptions&, IODebugContext*) override { return sync(); }
  IOStatus FsyncWithDirOptions(const IOOptions&, IODebugContext*, const rocksdb::DirFsyncOptions&) override {
    return sync();
  }

 private:
  IOStatus sync() {  // recorded, not passed down (as a file's)
    if (fs_.admit() != PowerLossFs::Admit::yes) return power_off();
    fs_.directory_synced(path_);
    return IOStatus::OK();
  }

  PowerLossFs& fs_;
  std::string path_;
};

}  // namespace

PowerLossFs::PowerLossFs(std::filesystem::path shadow, uint64_t seed, Tail tail)
    : FileSystemWrapper(rocksdb::FileSystem::Default()), shadow_(std::move(shadow)), tail_(tail), rng_(seed) {
  fs::create_directories(shadow_);
}

void PowerLossFs::cut_power() {
  std::lock_guard lock(mutex_);
  powered_ = false;
}

void PowerLossFs::cut_power_at(uint64_t n) {
  std::lock_guard lock(mutex_);
  cut_at_ = n == 0 ? 0 : mutations_ + n;
}

bool PowerLossFs::powered() const {
  std::lock_guard lock(mutex_);
  return powered_;
}

uint64_t PowerLossFs::mutations() const {
  std::lock_guard lock(mutex_);
  return mutations_;
}

PowerLossFs::Admit PowerLossFs::admit() {
  std::lock_guard lock(mutex_);
  if (!powered_) return Admit::no;
  ++mutations_;
  if (cut_at_ == 0 || mutations_ < cut_at_) return Admit::yes;
  powered_ = false;
  return Admit::last;
}

uint64_t PowerLossFs::random_below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

std::shared_ptr<PowerLossFs::FileState> PowerLossFs::track(const std::string& path, bool fresh, bool existed) {
  std::lock_guard lock(mutex_);
  auto& state = files_[path];
  if (fresh || !state) {
    state = std::make_shared<FileState>();
    std::error_code ec;
    // A file this wrapper did not write was there before the test: durable.
    if (!fresh && existed) state->size = state->synced = fs::file_size(path, ec);
  }
  if (!existed) changes_.push_back({Change::created, path, {}, {}});
  return state;
}

std::string PowerLossFs::set_aside(const std::string& path) {
  const std::string kept = (shadow_ / std::to_string(++kept_)).string();
  std::error_code ec;
  fs::rename(path, kept, ec);
  if (ec) return {};
  if (auto it = files_.find(path); it != files_.end()) {
    files_[kept] = it->second;
    files_.erase(it);
  }
  return kept;
}

void PowerLossFs::directory_synced(const std::string& dir) {
  std::lock_guard lock(mutex_);
  if (lose_directory_fsyncs_) return;
  const std::string d = normal(dir);
  std::erase_if(changes_, [&](const Change& c) {
    if (parent_of(c.path) != d) return false;
    if (!c.kept.empty()) {  // the delete or the replacing rename is final: the old file is gone for good
      std::error_code ec;
      fs::remove(c.kept, ec);
      files_.erase(c.kept);
    }
    return true;
  });
}

rocksdb::FileOptions without_fallocate(const rocksdb::FileOptions& options) {
  rocksdb::FileOptions o(options);
  o.allow_fallocate = false;
  return o;
}

IOStatus PowerLossFs::NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) {
  if (admit() != Admit::yes) return power_off();
  const std::string path = normal(name);
  const bool existed = exists(path);
  std::unique_ptr<rocksdb::FSWritableFile> file;
  IOStatus s = target()->NewWritableFile(name, without_fallocate(options), &file, dbg);
  if (!s.ok()) return s;
  *result = std::make_unique<TrackedFile>(*this, track(path, true, existed), std::move(file));
  return s;
}

IOStatus PowerLossFs::ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                         std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) {
  if (admit() != Admit::yes) return power_off();
  const std::string path = normal(name);
  const bool existed = exists(path);
  std::unique_ptr<rocksdb::FSWritableFile> file;
  IOStatus s = target()->ReopenWritableFile(name, without_fallocate(options), &file, dbg);
  if (!s.ok()) return s;
  *result = std::make_unique<TrackedFile>(*this, track(path, false, existed), std::move(file));
  return s;
}

IOStatus PowerLossFs::ReuseWritableFile(const std::string&, const std::string&, const rocksdb::FileOptions&,
                                        std::unique_ptr<rocksdb::FSWritableFile>*, IODebugContext*) {
  return IOStatus::NotSupported("PowerLossFs does not model recycled files");
}

IOStatus PowerLossFs::NewRandomRWFile(const std::string&, const rocksdb::FileOptions&,
                                      std::unique_ptr<rocksdb::FSRandomRWFile>*, IODebugContext*) {
  return IOStatus::NotSupported("PowerLossFs does not model random-access writes");
}

IOStatus PowerLossFs::LinkFile(const std::string&, const std::string&, const IOOptions&, IODebugContext*) {
  return IOStatus::NotSupported("PowerLossFs does not model hard links");
}

IOStatus PowerLossFs::NewDirectory(const std::string& name, const IOOptions& options,
                                   std::unique_ptr<rocksdb::FSDirectory>* result, IODebugContext* dbg) {
  std::unique_ptr<rocksdb::FSDirectory> dir;
  IOStatus s = target()->NewDirectory(name, options, &dir, dbg);
  if (s.ok()) *result = std::make_unique<TrackedDir>(*this, normal(name), std::move(dir));
  return s;
}

IOStatus PowerLossFs::DeleteFile(const std::string& name, const IOOptions& options, IODebugContext* dbg) {
  if (admit() != Admit::yes) return power_off();
  const std::string path = normal(name);
  if (!exists(path)) return target()->DeleteFile(name, options, dbg);  // its own NotFound
  std::lock_guard lock(mutex_);
  const std::string kept = set_aside(path);
  if (kept.empty()) return IOStatus::IOError("PowerLossFs cannot set aside " + path);
  changes_.push_back({Change::deleted, path, {}, kept});
  return IOStatus::OK();
}

IOStatus PowerLossFs::RenameFile(const std::string& from, const std::string& to, const IOOptions& options,
                                 IODebugContext* dbg) {
  if (admit() != Admit::yes) return power_off();
  const std::string src = normal(from), dst = normal(to);
  if (!exists(src)) return target()->RenameFile(from, to, options, dbg);  // its own NotFound
  std::lock_guard lock(mutex_);
  const std::string kept = exists(dst) ? set_aside(dst) : std::string();
  IOStatus s = target()->RenameFile(from, to, options, dbg);
  if (!s.ok()) return s;
  if (auto it = files_.find(src); it != files_.end()) {
    files_[dst] = it->second;
    files_.erase(it);
  }
  changes_.push_back({Change::renamed, dst, src, kept});
  return s;
}

IOStatus PowerLossFs::Truncate(const std::string& name, size_t size, const IOOptions& options, IODebugContext* dbg) {
  if (admit() != Admit::yes) return power_off();
  IOStatus s = target()->Truncate(name, size, options, dbg);
  if (!s.ok()) return s;
  std::lock_guard lock(mutex_);
  if (auto it = files_.find(normal(name)); it != files_.end()) {
    it->second->size = size;
    it->second->synced = std::min<uint64_t>(it->second->synced, size);
  }
  return s;
}

PowerLossFs::Losses PowerLossFs::restore() {
  std::lock_guard lock(mutex_);
  Losses lost;
  const auto move_state = [&](const std::string& from, const std::string& to) {
    if (auto it = files_.find(from); it != files_.end()) {
      files_[to] = it->second;
      files_.erase(it);
    }
  };
  for (auto& [path, state] : files_) {
    uint64_t keep = state->synced;
    if (tail_ == Tail::random_prefix && state->size > state->synced) {
      // Write-back kept none of the tail, all of it, or some: a third each,
      // so whole unsynced records survive too, not only torn ones.
      const uint64_t tail = state->size - state->synced;
      const uint64_t pick = rng_() % 3;
      keep += pick == 0 ? 0 : pick == 1 ? tail : rng_() % (tail + 1);
    }
    std::error_code ec;
    const uint64_t on_disk = fs::file_size(path, ec);
    if (!ec && on_disk > keep) {
      fs::resize_file(path, keep);
      ++lost.files_cut;
      lost.bytes_dropped += static_cast<int64_t>(on_disk - keep);
    }
    state->size = state->synced = std::min(keep, ec ? keep : on_disk);
  }
  for (auto c = changes_.rbegin(); c != changes_.rend(); ++c) {
    switch (c->kind) {
      case Change::created:
        fs::remove(c->path);
        files_.erase(c->path);
        ++lost.files_removed;
        break;
      case Change::renamed:
        if (exists(c->path)) {
          fs::rename(c->path, c->from);
          move_state(c->path, c->from);
        }
        if (!c->kept.empty()) {
          fs::rename(c->kept, c->path);
          move_state(c->kept, c->path);
        }
        ++lost.renames_undone;
        break;
      case Change::deleted:
        fs::rename(c->kept, c->path);
        move_state(c->kept, c->path);
        ++lost.deletes_undone;
        break;
    }
  }
  changes_.clear();
  powered_ = true;
  cut_at_ = 0;
  return lost;
}

std::unique_ptr<rocksdb::Env> env_on(const std::shared_ptr<rocksdb::FileSystem>& fs) {
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  // The pools are the default Env's, one thread each: stores of a test
  // that run at once would queue their flushes behind one another.
  env->SetBackgroundThreads(4, rocksdb::Env::Priority::HIGH);
  env->SetBackgroundThreads(4, rocksdb::Env::Priority::LOW);
  return env;
}

}  // namespace troupe::test
