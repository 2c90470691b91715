#include "persistence/store.h"
#include "persistence/store_layout.h"

#include <rocksdb/db.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <system_error>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

namespace troupe::persistence {
namespace {

constexpr const char* kVersionKey = "schema_version";

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Another process's lock is not a storage error: opening read-only past it
// would let two servers share one store.
bool held_by_another(const rocksdb::Status& st) {
  return st.IsIOError() && st.ToString().find("lock") != std::string::npos;
}

// The blocks the files directly in `dir` take on disk, as du counts them:
// RocksDB's transient files (a compaction's outputs before its inputs go,
// obsolete tables not yet purged, WAL preallocation) and what the file
// system preallocates, none of which RocksDB's live-size properties see.
int64_t allocated_bytes(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  int64_t total = 0;
  struct stat st {};
  while (const dirent* e = ::readdir(d))
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      total += static_cast<int64_t>(st.st_blocks) * 512;
  ::closedir(d);
  return total;
}

}  // namespace

struct Store::Impl {
  std::string dir;
  rocksdb::Options options;
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  // Shared by every use of the database, taken alone to reopen it (the
  // compaction thread and the persistence actor share the store).
  mutable std::shared_mutex gate;
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> families;  // indexed by Family
  mutable std::mutex health_mutex;
  StoreHealth health;
  int64_t last_recovery_ms = 0;
  uint64_t compaction_slice = 0;  // bytes of the deepest level a compaction takes at once; 0: all
  int64_t cap = 0;                // --max-store-bytes; 0: none
  // The directory's allocated bytes, read at most every kDiskEveryMs (a
  // spill asks for the store's size; ~100 stat calls a read).
  static constexpr int64_t kDiskEveryMs = 20;
  mutable std::mutex disk_mutex;
  mutable int64_t disk_bytes = 0, disk_read_ms = -kDiskEveryMs;
  int64_t on_disk() const {
    std::lock_guard lock(disk_mutex);
    const int64_t now = steady_ms();
    if (now - disk_read_ms >= kDiskEveryMs) {
      disk_bytes = allocated_bytes(dir);
      disk_read_ms = now;
    }
    return disk_bytes;
  }

  ~Impl() { close(); }
  rocksdb::ColumnFamilyHandle* cf(Family f) const { return families.at(static_cast<size_t>(f)); }

  rocksdb::DB& opened() const {
    if (!db) throw StoreError("the store in " + dir + " is not open: " + health_reason());
    return *db;
  }
  std::string health_reason() const {
    std::lock_guard lock(health_mutex);
    return health.reason;
  }
  bool writable() const {
    std::lock_guard lock(health_mutex);
    return health.writable;
  }
  void degrade(const std::string& why) {
    std::lock_guard lock(health_mutex);
    health.writable = false;
    health.reason = why;
    ++health.write_failures;
  }

  void close() {
    if (!db) return;
    // A clean stop leaves compressed tables, not a WAL to replay (a store
    // that cannot write keeps its WAL, replayed at the next open).
    if (writable()) (void)db->Flush(rocksdb::FlushOptions(), families);
    for (auto* h : families) (void)db->DestroyColumnFamilyHandle(h);
    families.clear();
    (void)db->Close();
    db.reset();
  }

  rocksdb::Status open(bool read_only) {
    rocksdb::DB* raw = nullptr;
    const rocksdb::Status st = read_only ? rocksdb::DB::OpenForReadOnly(options, dir, descriptors, &families, &raw)
                                         : rocksdb::DB::Open(options, dir, descriptors, &families, &raw);
    if (st.ok()) db.reset(raw);
    else families.clear();
    return st;
  }

  // Closes the database and opens it for writing, else read-only: a fresh
  // WAL and MANIFEST instead of RocksDB's Resume(), which goes on writing
  // through the log writer that failed (an assertion in RocksDB's own build
  // here). With the gate held alone.
  bool reopen() {
    close();
    const rocksdb::Status st = open(false);
    if (st.ok()) {
      std::lock_guard lock(health_mutex);
      health.writable = true;
      health.reason.clear();
      return true;
    }
    std::string why = "cannot open the store in " + dir + " for writing: " + st.ToString();
    if (!held_by_another(st)) {
      const rocksdb::Status ro = open(true);
      if (!ro.ok()) why += "; nor read-only: " + ro.ToString();
    }
    std::lock_guard lock(health_mutex);
    health.writable = false;
    health.reason = why;
    return false;
  }

  // One attempt, under the shared gate: not OK when it was not applied.
  rocksdb::Status try_write(const Batch::Ops& ops, bool sync) const;
};

Store::Store(const std::filesystem::path& dir, rocksdb::Env* env, int64_t max_bytes)
    : dir_(dir), impl_(std::make_unique<Impl>()) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw StoreError("cannot create the data directory " + dir.string() + ": " + ec.message());
  impl_->dir = dir.string();
  impl_->options = store_options(dir.string(), max_bytes);
  impl_->compaction_slice = compaction_slice_bytes(max_bytes);
  impl_->cap = max_bytes;
  if (env) impl_->options.env = env;
  impl_->descriptors = family_descriptors(impl_->options);
  const rocksdb::Status st = impl_->open(false);
  if (!st.ok()) {
    std::string why = st.ToString();
    if (held_by_another(st)) throw StoreError("cannot open the store in " + dir.string() + ": " + why +
                                              " (is another troupe serve using this data directory?)");
    // A store that is there but cannot be written (a full disk) still serves
    // what it holds; a new one has nothing to serve.
    const rocksdb::Status ro = impl_->open(true);
    if (!ro.ok()) throw StoreError("cannot open the store in " + dir.string() + ": " + why);
    impl_->degrade("cannot open the store in " + dir.string() + " for writing: " + why);
    impl_->health.write_failures = 0;
    impl_->last_recovery_ms = steady_ms();
  }
  const auto version = get(Family::meta, kVersionKey);
  if (!version) {
    Batch b;
    b.put(Family::meta, kVersionKey, std::to_string(kSchemaVersion));
    write(b, true);
  } else if (*version != std::to_string(kSchemaVersion)) {
    throw StoreError("the store in " + dir.string() + " has schema version " + *version + "; this troupe reads version " +
                     std::to_string(kSchemaVersion) + " (use another --data-dir, or a troupe of that version)");
  }
}

Store::~Store() = default;

std::optional<std::string> Store::get(Family f, std::string_view key) const {
  std::shared_lock gate(impl_->gate);
  std::string value;
  const rocksdb::Status st = impl_->opened().Get(rocksdb::ReadOptions(), impl_->cf(f), rocksdb::Slice(key.data(), key.size()), &value);
  if (st.IsNotFound()) return std::nullopt;
  if (!st.ok()) throw StoreError("cannot read the store in " + dir_.string() + ": " + st.ToString());
  return value;
}

namespace {

// Probes are keys of one fixed length, read as base-256 numbers: their order
// is the store's (bytewise) key order, so a bad block can be bisected.
constexpr size_t kProbeBytes = 256;

std::string midpoint(const std::string& lo, const std::string& hi) {
  std::string mid(lo.size(), '\0');
  unsigned carry = 0;
  std::vector<unsigned> sum(lo.size());
  for (size_t i = lo.size(); i-- > 0;) {
    const unsigned s = static_cast<uint8_t>(lo[i]) + static_cast<uint8_t>(hi[i]) + carry;
    sum[i] = s & 0xff;
    carry = s >> 8;
  }
  for (size_t i = 0; i < sum.size(); ++i) {  // halve, most significant byte first
    const unsigned v = (carry << 8) | sum[i];
    mid[i] = static_cast<char>(v >> 1);
    carry = v & 1;
  }
  return mid;
}

// The smallest probe after `last` whose seek reads cleanly: the first key past
// the damaged block that follows `last`. nullopt when nothing after it reads.
std::optional<std::string> probe_past(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* cf, const std::string& last) {
  const auto damaged = [&](const std::string& probe) {
    std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions(), cf));
    it->Seek(probe);
    return !it->Valid() && !it->status().ok();
  };
  const size_t n = std::max(kProbeBytes, last.size() + 1);
  std::string lo = last + '\0';
  lo.resize(n, '\0');  // just after `last`
  std::string hi(n, '\xff');
  if (damaged(hi)) return std::nullopt;
  if (!damaged(lo)) return lo;
  for (;;) {  // damaged(lo), !damaged(hi): at most 8n halvings
    std::string mid = midpoint(lo, hi);
    if (mid == lo) return hi;
    (damaged(mid) ? lo : hi) = std::move(mid);
  }
}

}  // namespace

void Store::scan(Family f, std::string_view prefix, const std::function<bool(std::string_view, std::string_view)>& each,
                 ScanDamage* damage) const {
  std::shared_lock gate(impl_->gate);
  rocksdb::DB& db = impl_->opened();
  std::string from(prefix), last(prefix);
  for (;;) {
    std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions(), impl_->cf(f)));
    for (it->Seek(from); it->Valid(); it->Next()) {
      const rocksdb::Slice k = it->key();
      const std::string_view key(k.data(), k.size());
      if (key.substr(0, prefix.size()) != prefix) return;
      const rocksdb::Slice v = it->value();
      if (!each(key, std::string_view(v.data(), v.size()))) return;
      last.assign(key);
    }
    if (it->status().ok()) return;
    const std::string why = "cannot read the store in " + dir_.string() + ": " + it->status().ToString();
    if (!damage) throw StoreError(why);
    if (damage->blocks++ == 0) damage->first = why;
    auto next = probe_past(db, impl_->cf(f), last);
    if (!next || *next == from || next->compare(0, prefix.size(), prefix) > 0) return;
    from = std::move(*next);
  }
}

rocksdb::Status Store::Impl::try_write(const Batch::Ops& ops, bool sync) const {
  std::shared_lock lock(gate);
  if (!db || !writable()) return rocksdb::Status::Aborted(health_reason());
  rocksdb::WriteBatch wb;
  for (const auto& op : ops) {
    const rocksdb::Status st = op.erase ? wb.Delete(cf(op.family), op.key) : wb.Put(cf(op.family), op.key, op.value);
    if (!st.ok()) return st;
  }
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  return db->Write(wo, &wb);
}

void Store::write(const Batch& batch, bool sync) {
  const bool was_writable = impl_->writable();
  rocksdb::Status st = was_writable ? impl_->try_write(batch.ops_, sync) : rocksdb::Status::Aborted(impl_->health_reason());
  if (st.ok()) return;
  if (was_writable) {
    impl_->degrade("cannot write to the store in " + dir_.string() + ": " + st.ToString());
    std::lock_guard lock(impl_->health_mutex);
    impl_->last_recovery_ms = 0;  // the first failure retries at once: the disk may have room again
  }
  // Batches are puts and deletes: applying one twice (its WAL record may
  // have landed before the sync failed) leaves the same store.
  if (recover()) {
    st = impl_->try_write(batch.ops_, sync);
    if (st.ok()) return;
    impl_->degrade("cannot write to the store in " + dir_.string() + ": " + st.ToString());
  } else {
    std::lock_guard lock(impl_->health_mutex);
    ++impl_->health.write_failures;
  }
  throw StoreError(impl_->health_reason() + " (writes are refused until the disk takes them again)");
}

StoreHealth Store::health() const {
  std::lock_guard lock(impl_->health_mutex);
  return impl_->health;
}

bool Store::recover() {
  {
    std::lock_guard lock(impl_->health_mutex);
    if (impl_->health.writable) return true;
    const int64_t now = steady_ms();
    if (impl_->last_recovery_ms != 0 && now - impl_->last_recovery_ms < kRecoverEveryMs) return false;
    impl_->last_recovery_ms = now;
  }
  std::unique_lock gate(impl_->gate);
  if (impl_->writable()) return true;  // another thread reopened it meanwhile
  return impl_->reopen();
}

void Store::scan_after(Family f, std::string_view prefix, std::string_view after,
                       const std::function<bool(std::string_view, std::string_view)>& each) const {
  std::shared_lock gate(impl_->gate);
  std::unique_ptr<rocksdb::Iterator> it(impl_->opened().NewIterator(rocksdb::ReadOptions(), impl_->cf(f)));
  if (after.empty()) it->Seek(rocksdb::Slice(prefix.data(), prefix.size()));
  else it->Seek(std::string(after) + '\0');  // the smallest key after `after`
  for (; it->Valid(); it->Next()) {
    const std::string_view key(it->key().data(), it->key().size());
    if (key.substr(0, prefix.size()) != prefix) return;
    if (!each(key, std::string_view(it->value().data(), it->value().size()))) return;
  }
  if (!it->status().ok()) throw StoreError("cannot read the store in " + dir_.string() + ": " + it->status().ToString());
}

int64_t Store::approximate_bytes() const {
  std::shared_lock gate(impl_->gate);
  if (!impl_->db) return 0;
  uint64_t total = 0;
  for (auto* h : impl_->families)
    for (const auto* property : {&rocksdb::DB::Properties::kLiveSstFilesSize, &rocksdb::DB::Properties::kCurSizeAllMemTables}) {
      uint64_t v = 0;
      if (impl_->db->GetIntProperty(h, *property, &v)) total += v;
    }
  return impl_->cap > 0 ? std::max(static_cast<int64_t>(total), impl_->on_disk()) : static_cast<int64_t>(total);
}

namespace {

// The key ranges one family's compaction goes through, each holding about
// `slice` bytes of the deepest level's tables: a compaction of one range
// rewrites its tables there and whatever overlaps it above (the small upper
// levels), so the disk holds at most a slice twice at once. `slice` 0: one
// range, everything.
std::vector<std::pair<std::optional<std::string>, std::optional<std::string>>> compaction_ranges(
    rocksdb::DB& db, rocksdb::ColumnFamilyHandle* cf, uint64_t slice) {
  std::vector<std::pair<std::optional<std::string>, std::optional<std::string>>> ranges;
  rocksdb::ColumnFamilyMetaData meta;
  if (slice > 0) db.GetColumnFamilyMetaData(cf, &meta);
  const rocksdb::LevelMetaData* deepest = nullptr;
  for (const auto& level : meta.levels)
    if (!level.files.empty()) deepest = &level;
  if (!deepest || deepest->level == 0) return {{std::nullopt, std::nullopt}};
  std::vector<const rocksdb::SstFileMetaData*> files;
  for (const auto& f : deepest->files) files.push_back(&f);
  std::sort(files.begin(), files.end(), [](auto* x, auto* y) { return x->smallestkey < y->smallestkey; });
  std::optional<std::string> from;  // the first range starts before any key
  uint64_t bytes = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    bytes += files[i]->size;
    if (bytes < slice || i + 1 == files.size()) continue;
    ranges.emplace_back(from, files[i]->largestkey);
    from = files[i]->largestkey;
    bytes = 0;
  }
  ranges.emplace_back(from, std::nullopt);  // and the last runs past every key
  return ranges;
}

}  // namespace

void Store::compact() {
  std::shared_lock gate(impl_->gate);
  if (!impl_->db || !impl_->writable()) throw StoreError("cannot compact the store in " + dir_.string() + ": " +
                                                         impl_->health_reason());
  rocksdb::CompactRangeOptions o;
  // Deleted records sit in the last level: only rewriting it drops them.
  o.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForceOptimized;
  for (auto* h : impl_->families) {
    for (const auto& [from, to] : compaction_ranges(*impl_->db, h, impl_->compaction_slice)) {
      const rocksdb::Slice begin(from ? *from : std::string()), end(to ? *to : std::string());
      const rocksdb::Status st = impl_->db->CompactRange(o, h, from ? &begin : nullptr, to ? &end : nullptr);
      if (st.ok()) continue;
      // A failed compaction stops RocksDB's writes too: the next write reopens.
      const std::string why = "cannot compact the store in " + dir_.string() + ": " + st.ToString();
      impl_->degrade(why);
      throw StoreError(why);
    }
  }
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

uint32_t read_be32(std::string_view b) {
  if (b.size() < 4) return 0;
  const auto u = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(b[i])); };
  return u(0) << 24 | u(1) << 16 | u(2) << 8 | u(3);
}

std::string be64(uint64_t v) { return be32(static_cast<uint32_t>(v >> 32)) + be32(static_cast<uint32_t>(v)); }

uint64_t read_be64(std::string_view b) {
  if (b.size() < 8) return 0;
  return static_cast<uint64_t>(read_be32(b)) << 32 | read_be32(b.substr(4));
}

}  // namespace troupe::persistence
