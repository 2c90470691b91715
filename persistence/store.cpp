#include "persistence/store.h"
#include "persistence/store_layout.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <array>
#include <system_error>

namespace troupe::persistence {
namespace {

constexpr const char* kVersionKey = "schema_version";

}  // namespace

struct Store::Impl {
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> families;  // indexed by Family
  ~Impl() {
    if (!db) return;
    // A clean stop leaves compressed tables, not a WAL to replay.
    (void)db->Flush(rocksdb::FlushOptions(), families);
    for (auto* h : families) (void)db->DestroyColumnFamilyHandle(h);
    (void)db->Close();
  }
  rocksdb::ColumnFamilyHandle* cf(Family f) const { return families.at(static_cast<size_t>(f)); }
};

Store::Store(const std::filesystem::path& dir, rocksdb::Env* env) : dir_(dir), impl_(std::make_unique<Impl>()) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw StoreError("cannot create the data directory " + dir.string() + ": " + ec.message());
  rocksdb::Options options = store_options();
  if (env) options.env = env;
  const auto descriptors = family_descriptors(options);
  rocksdb::DB* db = nullptr;
  const rocksdb::Status st = rocksdb::DB::Open(options, dir.string(), descriptors, &impl_->families, &db);
  if (!st.ok()) {
    std::string why = st.ToString();
    if (st.IsIOError() && why.find("lock") != std::string::npos)
      why += " (is another troupe serve using this data directory?)";
    throw StoreError("cannot open the store in " + dir.string() + ": " + why);
  }
  impl_->db.reset(db);
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
  std::string value;
  const rocksdb::Status st = impl_->db->Get(rocksdb::ReadOptions(), impl_->cf(f), rocksdb::Slice(key.data(), key.size()), &value);
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
  std::string from(prefix), last(prefix);
  for (;;) {
    std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->cf(f)));
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
    auto next = probe_past(*impl_->db, impl_->cf(f), last);
    if (!next || *next == from || next->compare(0, prefix.size(), prefix) > 0) return;
    from = std::move(*next);
  }
}

void Store::write(const Batch& batch, bool sync) {
  rocksdb::WriteBatch wb;
  for (const auto& op : batch.ops_) {
    const rocksdb::Status st = op.erase ? wb.Delete(impl_->cf(op.family), op.key)
                                        : wb.Put(impl_->cf(op.family), op.key, op.value);
    if (!st.ok()) throw StoreError("cannot prepare a write: " + st.ToString());
  }
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  rocksdb::Status st = impl_->db->Write(wo, &wb);
  if (!st.ok()) {
    // A failed write puts RocksDB in read-only mode until resumed; try once
    // (the disk may have space again) so a transient failure does not
    // refuse every later write.
    if (impl_->db->Resume().ok()) st = impl_->db->Write(wo, &wb);
  }
  if (!st.ok()) throw StoreError("cannot write to the store in " + dir_.string() + ": " + st.ToString());
}

void Store::scan_after(Family f, std::string_view prefix, std::string_view after,
                       const std::function<bool(std::string_view, std::string_view)>& each) const {
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->cf(f)));
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
  uint64_t total = 0;
  for (auto* h : impl_->families)
    for (const auto* property : {&rocksdb::DB::Properties::kLiveSstFilesSize, &rocksdb::DB::Properties::kCurSizeAllMemTables}) {
      uint64_t v = 0;
      if (impl_->db->GetIntProperty(h, *property, &v)) total += v;
    }
  return static_cast<int64_t>(total);
}

void Store::compact() {
  rocksdb::CompactRangeOptions o;
  // Deleted records sit in the last level: only rewriting it drops them.
  o.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForceOptimized;
  for (auto* h : impl_->families) {
    const rocksdb::Status st = impl_->db->CompactRange(o, h, nullptr, nullptr);
    if (!st.ok()) throw StoreError("cannot compact the store in " + dir_.string() + ": " + st.ToString());
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
