#include "persistence/store_check.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <array>
#include <ctime>
#include <memory>

#include "persistence/jobs.h"
#include "persistence/sessions.h"
#include "persistence/store.h"
#include "persistence/store_layout.h"

namespace troupe::persistence {
namespace {

// Every block's checksum, on a read-only open (which also tells a family
// missing from the manifest).
void verify_checksums(const std::filesystem::path& dir, StoreCheck& out) {
  const rocksdb::Options options = store_options(dir.string());
  std::vector<std::string> present;
  if (const rocksdb::Status l = rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(options), dir.string(), &present); !l.ok())
    throw StoreError("cannot read the store's manifest in " + dir.string() + ": " + l.ToString() +
                     " (run `troupe store repair`)");
  // 'responses' came later: a store written before it gets it at its next open.
  for (const char* name : kFamilyNames)
    if (name != std::string("meta") && name != std::string("responses") &&
        std::find(present.begin(), present.end(), name) == present.end())
      throw StoreError("the store in " + dir.string() + " has no '" + name + "' family (run `troupe store repair`)");
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  std::vector<rocksdb::ColumnFamilyDescriptor> families = family_descriptors(options);
  std::erase_if(families, [&](const rocksdb::ColumnFamilyDescriptor& d) {
    return std::find(present.begin(), present.end(), d.name) == present.end();
  });
  const rocksdb::Status st = rocksdb::DB::OpenForReadOnly(options, dir.string(), families, &handles, &raw);
  if (!st.ok()) throw StoreError("cannot open the store in " + dir.string() + " to check it: " + st.ToString());
  std::unique_ptr<rocksdb::DB> db(raw);
  if (const rocksdb::Status v = db->VerifyChecksum(); !v.ok()) out.problems.push_back("checksums: " + v.ToString());
  for (auto* h : handles) (void)db->DestroyColumnFamilyHandle(h);
}

// Every key under each prefix, erased in one batch.
void erase_prefixes(Store& store, Family f, const std::vector<std::string>& prefixes) {
  Batch b;
  for (const auto& p : prefixes)
    store.scan(f, p, [&](std::string_view key, std::string_view) {
      b.erase(f, std::string(key));
      return true;
    });
  if (!b.empty()) store.write(b, false);
}

// A job or session that lost part of itself to a damaged block cannot be
// resumed (the server refuses it at load): the repaired store leaves it out,
// and the kept original still holds what remains of it.
void drop_incomplete(Store& store, RepairOutcome& out) {
  JobBook jobs(store);
  for (const auto& id : jobs.ids()) try {
      jobs.load(id);
    } catch (const std::exception&) {
      const std::string z(1, '\0');
      erase_prefixes(store, Family::jobs, {"h" + id, "i" + id + z, "q" + id + z, "r" + id + z});
      out.dropped.push_back("job " + id);
    }
  SessionBook sessions(store);
  std::vector<std::string> ids;
  store.scan(Family::sessions, "h", [&](std::string_view key, std::string_view) {
    ids.emplace_back(key.substr(1));
    return true;
  });
  for (const auto& id : ids) try {
      sessions.load(id);
    } catch (const std::exception&) {
      erase_prefixes(store, Family::sessions, {"h" + id, "t" + id + std::string(1, '\0')});
      out.dropped.push_back("session " + id);
    }
}

}  // namespace

StoreCheck check_store(const std::filesystem::path& dir) {
  if (!std::filesystem::exists(dir / "CURRENT"))
    throw StoreError(dir.string() + " holds no store (no RocksDB CURRENT file)");
  StoreCheck out;
  verify_checksums(dir, out);
  // Then as the server reads: every record, damaged blocks stepped over and
  // counted, and each job and session decoded whole.
  Store store(dir);
  for (size_t i = 0; i < kFamilyNames.size(); ++i) {
    StoreCheck::FamilyCount count{kFamilyNames[i], 0};
    ScanDamage damage;
    store.scan(static_cast<Family>(i), "", [&](std::string_view, std::string_view) { return ++count.records, true; }, &damage);
    if (damage)
      out.problems.push_back(std::string(kFamilyNames[i]) + ": " + std::to_string(damage.blocks) +
                             " damaged blocks stepped over; the first: " + damage.first);
    out.families.push_back(count);
  }
  JobBook jobs(store);
  std::string listing;
  const std::vector<std::string> job_ids = jobs.ids(&listing);
  if (!listing.empty()) out.problems.push_back("listing jobs: " + listing);
  for (const auto& id : job_ids) try {
      if (jobs.load(id)) ++out.jobs;
    } catch (const std::exception& e) {
      out.problems.push_back("job '" + id + "': " + e.what());
    }
  SessionBook sessions(store);
  listing.clear();
  const std::vector<messages::SessionSummaryFields> listed = sessions.list(&listing);
  if (!listing.empty()) out.problems.push_back("listing sessions: " + listing);
  for (const auto& s : listed) try {
      if (sessions.load(s.session_id)) ++out.sessions;
    } catch (const std::exception& e) {
      out.problems.push_back("session '" + s.session_id + "': " + e.what());
    }
  return out;
}

RepairOutcome repair_store(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) throw StoreError(dir.string() + " is not a directory");
  RepairOutcome out;
  try {
    Store probe(dir);
  } catch (const StoreError&) {
    // What cannot be opened has a damaged manifest or log: RocksDB's RepairDB
    // rebuilds them from the files present (it drops a damaged table whole,
    // so it is not used for damage inside tables: the copy below is).
    const rocksdb::Options options = store_options(dir.string());
    const rocksdb::Status st = rocksdb::RepairDB(dir.string(), rocksdb::DBOptions(options), family_descriptors(options));
    if (!st.ok()) throw StoreError("repair of " + dir.string() + " failed: " + st.ToString());
    out.rebuilt_manifest = true;
  }
  // Every readable record into a fresh store beside it; damaged blocks are
  // stepped over (Store::scan with ScanDamage), so only their records are lost.
  const std::filesystem::path fresh = dir.string() + ".repairing";
  std::filesystem::remove_all(fresh);
  {
    Store from(dir);
    Store to(fresh);
    for (const Family f : {Family::meta, Family::sessions, Family::jobs, Family::kv_pages, Family::responses}) {
      Batch batch;
      size_t bytes = 0;
      ScanDamage damage;
      from.scan(f, "", [&](std::string_view key, std::string_view value) {
        batch.put(f, std::string(key), std::string(value));
        ++out.records;
        if ((bytes += key.size() + value.size()) > (4u << 20)) {
          to.write(batch, false);
          batch = Batch();
          bytes = 0;
        }
        return true;
      }, &damage);
      if (!batch.empty()) to.write(batch, false);
      out.damaged_blocks += damage.blocks;
    }
    drop_incomplete(to, out);
  }  // closing `to` flushes its tables to disk
  out.original = dir.string() + ".damaged-" + std::to_string(std::time(nullptr));
  std::filesystem::rename(dir, out.original);
  std::filesystem::rename(fresh, dir);
  return out;
}

}  // namespace troupe::persistence
