#pragma once
// The store's RocksDB layout, for the two files that open it with RocksDB
// itself (store.cpp, store_check.cpp): the column families in Family order
// ("meta" is RocksDB's default family) and the options each is written with.
// RocksDB headers: include only from those .cpp files.
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "persistence/store_log.h"

namespace troupe::persistence {

inline constexpr std::array<const char*, 5> kFamilyNames = {"meta", "sessions", "jobs", "kv_pages", "responses"};

// RocksDB's own transient files, as shares of a store capped at `cap` bytes
// (--max-store-bytes): the WAL (and its preallocation), a compaction's output
// before its inputs go, a memtable's flush, the MANIFEST. Sized so that they
// add at most kTransientShare of the cap on top of the live data
// (docs/DECISIONS.md, "The byte cap holds at every moment"); 0: RocksDB's defaults.
inline constexpr double kTransientShare = 0.06;
inline void bound_transients(rocksdb::Options& o, int64_t cap) {
  if (cap <= 0) return;
  const auto share = [&](int64_t divisor, int64_t floor, int64_t ceiling) {
    return static_cast<uint64_t>(std::clamp(cap / divisor, floor, ceiling));
  };
  constexpr int64_t KiB = 1024, MiB = 1024 * KiB;
  o.write_buffer_size = share(128, 256 * KiB, 64 * MiB);       // a flush's new table; the WAL preallocates 1.1x
  o.max_total_wal_size = share(64, 1 * MiB, 1024 * MiB);       // older WALs force their families' flushes
  o.target_file_size_base = share(128, 256 * KiB, 64 * MiB);
  o.max_compaction_bytes = share(64, 1 * MiB, 1024 * MiB);     // an automatic compaction's inputs at most
  o.max_manifest_file_size = share(128, 1 * MiB, 1024 * MiB);
  o.manifest_preallocation_size = share(256, 64 * KiB, 4 * MiB);  // 4 MiB by default
  // Small upper levels: an L0-to-L1 compaction (all of L1 its L0 files span)
  // stays small, and the data settles in deeper levels, where compactions
  // take one key range at a time.
  o.max_bytes_for_level_base = share(16, 1 * MiB, 256 * MiB);
  // Level 0 behind a busy disk: RocksDB lets 36 flushed tables pile up there
  // before it stops writes, and the one compaction that then takes them all
  // with level 1 holds both copies at once (~30 % of the cap). Writes slow at
  // 8 and wait at 12 (~10 %): back-pressure on the writer, not a larger disk.
  o.level0_slowdown_writes_trigger = 8;
  o.level0_stop_writes_trigger = 12;
}

// The bytes of the deepest level one step of Store::compact() rewrites at once: 0, all.
inline uint64_t compaction_slice_bytes(int64_t cap) {
  return cap <= 0 ? 0 : static_cast<uint64_t>(std::max<int64_t>(cap / 32, 1 << 20));
}

// `dir`: the store's directory, where its info log goes (StoreLog).
inline rocksdb::Options store_options(const std::string& dir, int64_t cap = 0) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  options.max_open_files = 256;
  options.info_log = std::make_shared<StoreLog>(dir);
  bound_transients(options, cap);
  // Small, rarely written values: LZ4 where it helps (text), cheap where it does not.
  options.compression = rocksdb::kLZ4Compression;
  return options;
}

inline std::vector<rocksdb::ColumnFamilyDescriptor> family_descriptors(const rocksdb::Options& options) {
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const char* name : kFamilyNames) {
    rocksdb::ColumnFamilyOptions cf(options);
    // KV pages are INT8 already; ZSTD still takes what entropy is left (the
    // codes cluster near zero), LZ4 takes almost nothing.
    if (name == std::string("kv_pages")) cf.compression = rocksdb::kZSTD;
    descriptors.emplace_back(name == std::string("meta") ? rocksdb::kDefaultColumnFamilyName : name, cf);
  }
  return descriptors;
}

}  // namespace troupe::persistence
