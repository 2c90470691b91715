// The RocksDB store itself, on a real store in a temporary directory: the
// stores and folders it refuses. The books it holds have their own files
// (sessions, jobs, kv_pages, store_check).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "persistence/store.h"
#include "tests/persistence/temp_dir.h"

using namespace troupe;
using namespace troupe::persistence;

using test::TempDir;

TEST_CASE("a store of another schema version is refused with a clear error", "[persistence]") {
  TempDir dir("version");
  {
    Store store(dir.path);
    Batch b;
    b.put(Family::meta, "schema_version", "99");
    store.write(b);
  }
  CHECK_THROWS_WITH(Store(dir.path), Catch::Contains("schema version 99") && Catch::Contains("reads version 1"));
}

TEST_CASE("a data directory in use by another store is refused", "[persistence]") {
  TempDir dir("lock");
  Store first(dir.path);
  CHECK_THROWS_WITH(Store(dir.path), Catch::Contains("another troupe serve"));
}

TEST_CASE("a data directory that cannot be created is a clear error", "[persistence]") {
  TempDir dir("file");
  std::filesystem::create_directories(dir.path);
  { std::ofstream(dir.path / "plain-file") << "x"; }
  CHECK_THROWS_WITH(Store(dir.path / "plain-file" / "store"), Catch::Contains("cannot create the data directory"));
}
