#pragma once
// The RocksDB store under `troupe serve --data-dir`: five column families,
//
//   meta      "schema_version" → decimal text (kSchemaVersion); a store of
//             another version is refused at open with a clear error;
//             "cascade/escalation_budget" → the budget rule's figures
//             (service/escalation_budget.h: EscalationBudget::save)
//   sessions  chat sessions (layout: persistence/sessions.h)
//   jobs      batch jobs (layout: persistence/jobs.h)
//   kv_pages  spilled KV pages, reserved for the KV tiers
//   responses the response cache tier (layout: persistence/response_cache.h)
//
// Only the persistence actor calls it, never the engine step's thread.
// Writes go as one atomic Batch; sync batches are on disk (WAL fsync'd)
// when write() returns, which is what an acknowledgement to a client means.
// RocksDB stays behind this file: its headers are heavy.
//
// Storage errors (a full disk, EIO, a read-only file system) are answers,
// never crashes: a write that fails throws StoreError and leaves the store
// degraded (health()), serving reads from what it holds while writes are
// refused; it is opened afresh (a new WAL) before the next write or by
// recover(), never resumed in place, and a store that cannot be opened for
// writing (say, on a full disk) is opened read-only. Why: docs/DECISIONS.md,
// "Storage errors".
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rocksdb {
class Env;
}

namespace troupe::persistence {

// Opening, reading or writing failed; what() says what and why (the
// directory, RocksDB's status).
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether writes go through; while not, why (the last storage error).
struct StoreHealth {
  bool writable = true;
  std::string reason;
  int64_t write_failures = 0;  // writes refused since the store was opened
};

enum class Family : uint8_t { meta = 0, sessions = 1, jobs = 2, kv_pages = 3, responses = 4 };

// What a scan could not read: blocks skipped for damage (a failed checksum)
// and the first reason. A scan given one goes on past a damaged block.
struct ScanDamage {
  int64_t blocks = 0;
  std::string first;
  explicit operator bool() const { return blocks > 0; }
};

// Puts and deletes applied together, or not at all.
class Batch {
 public:
  void put(Family f, std::string key, std::string value) { ops_.push_back({f, std::move(key), std::move(value), false}); }
  void erase(Family f, std::string key) { ops_.push_back({f, std::move(key), {}, true}); }
  bool empty() const { return ops_.empty(); }

 private:
  friend class Store;
  struct Op {
    Family family;
    std::string key, value;
    bool erase;
  };
  using Ops = std::vector<Op>;
  Ops ops_;
};

class Store {
 public:
  static constexpr int kSchemaVersion = 1;

  // Opens (creating if needed) the store in `dir`. Throws StoreError when the
  // directory cannot be created, another process holds it, it holds a store
  // of another schema version, or a new store cannot be written. An existing
  // store that cannot be written (no space left) opens read-only: degraded.
  // `env`: the RocksDB Env to open it on (tests inject file systems that
  // lose unsynced writes or fail); null, the default one. It must outlive the Store.
  // `max_bytes`: the store's cap (--max-store-bytes), which sizes RocksDB's
  // transient files to a small share of it; 0: no cap.
  explicit Store(const std::filesystem::path& dir, rocksdb::Env* env = nullptr, int64_t max_bytes = 0);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::filesystem::path& dir() const { return dir_; }

  std::optional<std::string> get(Family f, std::string_view key) const;
  // Every key starting with `prefix`, in key order, until `each` returns false.
  // A damaged block throws StoreError; with `damage`, it is counted there and
  // the scan resumes at the first readable key after it (only that block's
  // records are missed).
  void scan(Family f, std::string_view prefix,
            const std::function<bool(std::string_view key, std::string_view value)>& each,
            ScanDamage* damage = nullptr) const;
  // Applies the batch atomically; sync: durable before returning. Throws
  // StoreError when it is not applied (a degraded store first tries to
  // recover, at most every kRecoverEveryMs).
  void write(const Batch& batch, bool sync = true);
  StoreHealth health() const;
  // A degraded store tries to open for writing again; true when writable.
  // The server calls it on a timer, so writing resumes once space returns
  // even with no write asking.
  bool recover();
  static constexpr int64_t kRecoverEveryMs = 200;

  // As scan, from the first key after `after` ("" : from the prefix's
  // first), so a long scan can be taken in bounded slices. Damage throws.
  void scan_after(Family f, std::string_view prefix, std::string_view after,
                  const std::function<bool(std::string_view key, std::string_view value)>& each) const;
  // The store's size: RocksDB's live data (table files and memtables, every
  // family); in a capped store the blocks its directory takes on disk where
  // they are more (transient files, preallocation), so the cap holds at every
  // moment. Deleted records count until a compaction drops them.
  int64_t approximate_bytes() const;
  // Rewrites every family so deleted records leave the disk. Blocks for as
  // long as that takes: call it off the thread that serves writes.
  void compact();

 private:
  struct Impl;
  std::filesystem::path dir_;
  std::unique_ptr<Impl> impl_;
};

// Big-endian, so keys sort by number.
std::string be32(uint32_t v);
uint32_t read_be32(std::string_view bytes);
std::string be64(uint64_t v);
uint64_t read_be64(std::string_view bytes);

}  // namespace troupe::persistence
