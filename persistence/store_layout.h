#pragma once
// The store's RocksDB layout, for the two files that open it with RocksDB
// itself (store.cpp, store_check.cpp): the column families in Family order
// ("meta" is RocksDB's default family) and the options each is written with.
// RocksDB headers: include only from those .cpp files.
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <array>
#include <string>
#include <vector>

namespace troupe::persistence {

inline constexpr std::array<const char*, 5> kFamilyNames = {"meta", "sessions", "jobs", "kv_pages", "responses"};

inline rocksdb::Options store_options() {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  options.max_open_files = 256;
  options.keep_log_file_num = 4;
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
