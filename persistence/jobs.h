#pragma once
// Batch jobs in the store's `jobs` column family:
//
//   'h' <job_id>                    → store.JobHeader (messages/store.fbs)
//   'i' <job_id> 0x00 <index be32>  → item `index`'s input text, as submitted
//   'q' <job_id> 0x00 <index be32>  → a job of requests: item `index`'s Request
//   'r' <job_id> 0x00 <index be32>  → wire.JobItemResult, once the item finished
//
// A job is written whole (header and every item) in one sync batch before
// it is acknowledged; each item's result is one sync batch before its event
// is published. After a crash, exactly the items without an 'r' key run
// again: none is lost, none is run twice.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "messages/client_frames.h"
#include "messages/job_frames.h"
#include "persistence/store.h"

namespace troupe::persistence {

struct JobRecord {
  std::string id;
  std::string owner;  // persistence/principal.h
  wire::JobState state = wire::JobState::running;
  std::string item_template;  // "{item}" stands for each item
  messages::SamplingFields sampling;
  wire::Priority priority = wire::Priority::batch;
  int64_t created_ms = 0, updated_ms = 0;
  std::vector<std::string> items;
  // A job of whole requests: requests[i] is item i's Request bytes, items[i]
  // its label (SubmitJob.requests); empty for a template job.
  std::vector<std::string> requests;
  std::string annotation;  // SubmitJob.annotation
  messages::JobCheckFields check;  // SubmitJob.check
  std::map<int32_t, messages::JobItemFields> results;  // finished items, by index

  messages::JobSummaryFields summary() const;
  // The item's prompt text: the template with every "{item}" replaced.
  std::string prompt(int32_t index) const;
  // Its length in bytes, counted without building it (a template of many
  // "{item}"s times a long item must be refused before it is expanded).
  size_t prompt_bytes(int32_t index) const;
};

// A job's header alone: what retention decides by.
struct JobStamp {
  std::string id;
  wire::JobState state = wire::JobState::running;
  int64_t updated_ms = 0;
};

class JobBook {
 public:
  explicit JobBook(Store& store) : store_(store) {}

  void create(const JobRecord& job);  // header and items, durably; throws StoreError
  // The item's result, and the header (its state may have changed), durably.
  void record_result(const JobRecord& job, const messages::JobItemFields& result);
  void write_header(const JobRecord& job);  // durably
  std::optional<JobRecord> load(std::string_view id) const;
  // Every stored job's id. With `damage`, the listing goes on past a damaged
  // block (its jobs are missing) and says why there; without, it throws
  // StoreError.
  std::vector<std::string> ids(std::string* damage = nullptr) const;
  // Up to `max` headers in id order after job `after` ("": from the first); corrupt ones skipped.
  std::vector<JobStamp> stamps(std::string_view after, size_t max) const;
  std::optional<JobStamp> stamp(std::string_view id) const;
  // Adds the deletes of the header, items and results to `b`; the bytes they hold (keys and values).
  int64_t erase(std::string_view id, Batch& b) const;

 private:
  Store& store_;
};

}  // namespace troupe::persistence
