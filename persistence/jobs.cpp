#include "persistence/jobs.h"

#include "messages/store_generated.h"

namespace troupe::persistence {
namespace {

std::string job_header_key(std::string_view id) { return std::string(1, 'h').append(id); }
std::string item_prefix(char kind, std::string_view id) { return std::string(1, kind).append(id).append(1, '\0'); }

std::string encode_header(const JobRecord& j) {
  flatbuffers::FlatBufferBuilder fbb(256 + j.item_template.size() + j.annotation.size());
  const auto id = fbb.CreateString(j.id);
  const auto tmpl = fbb.CreateString(j.item_template);
  const auto sampling = messages::build_sampling(fbb, j.sampling);
  const auto owner = j.owner.empty() ? 0 : fbb.CreateString(j.owner);
  const auto note = j.annotation.empty() ? 0 : fbb.CreateString(j.annotation);
  const auto check = messages::build_job_check(fbb, j.check);
  fbb.Finish(store::CreateJobHeader(fbb, id, j.state, static_cast<int32_t>(j.items.size()), tmpl, sampling, j.priority,
                                    j.created_ms, j.updated_ms, owner, !j.requests.empty(), note, check));
  return messages::finish_bytes(fbb);
}

std::string encode_result(const messages::JobItemFields& r) {
  flatbuffers::FlatBufferBuilder fbb(128 + r.text.size());
  fbb.Finish(messages::build_job_item(fbb, r));
  return messages::finish_bytes(fbb);
}

}  // namespace

messages::JobSummaryFields JobRecord::summary() const {
  messages::JobSummaryFields s;
  s.job_id = id;
  s.state = state;
  s.items = static_cast<int32_t>(items.size());
  s.finished_items = static_cast<int32_t>(results.size());
  for (const auto& [i, r] : results) {
    s.completion_tokens += r.completion_tokens;
    s.failed_items += r.error.empty() ? 0 : 1;
  }
  s.created_ms = created_ms;
  s.updated_ms = updated_ms;
  s.owner = owner;
  s.annotation = annotation;
  return s;
}

size_t JobRecord::prompt_bytes(int32_t index) const {
  const size_t item = items.at(static_cast<size_t>(index)).size();
  if (item_template.empty()) return item;
  size_t uses = 0;
  for (size_t at = 0; (at = item_template.find("{item}", at)) != std::string::npos; at += 6) ++uses;
  return item_template.size() - 6 * uses + uses * item;
}

std::string JobRecord::prompt(int32_t index) const {
  const std::string& item = items.at(static_cast<size_t>(index));
  if (item_template.empty()) return item;
  std::string out;
  size_t from = 0;
  for (size_t at; (at = item_template.find("{item}", from)) != std::string::npos; from = at + 6)
    out.append(item_template, from, at - from).append(item);
  return out.append(item_template, from, std::string::npos);
}

void JobBook::create(const JobRecord& job) {
  Batch b;
  b.put(Family::jobs, job_header_key(job.id), encode_header(job));
  for (size_t i = 0; i < job.items.size(); ++i)
    b.put(Family::jobs, item_prefix('i', job.id) + be32(static_cast<uint32_t>(i)), job.items[i]);
  for (size_t i = 0; i < job.requests.size(); ++i)
    b.put(Family::jobs, item_prefix('q', job.id) + be32(static_cast<uint32_t>(i)), job.requests[i]);
  store_.write(b, true);
}

void JobBook::record_result(const JobRecord& job, const messages::JobItemFields& result) {
  Batch b;
  b.put(Family::jobs, item_prefix('r', job.id) + be32(static_cast<uint32_t>(result.index)), encode_result(result));
  b.put(Family::jobs, job_header_key(job.id), encode_header(job));
  store_.write(b, true);
}

void JobBook::write_header(const JobRecord& job) {
  Batch b;
  b.put(Family::jobs, job_header_key(job.id), encode_header(job));
  store_.write(b, true);
}

std::optional<JobRecord> JobBook::load(std::string_view id) const {
  const auto bytes = store_.get(Family::jobs, job_header_key(id));
  if (!bytes) return std::nullopt;
  flatbuffers::Verifier v(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
  if (!v.VerifyBuffer<store::JobHeader>(nullptr)) throw StoreError("job '" + std::string(id) + "': its header is corrupt");
  const auto* h = flatbuffers::GetRoot<store::JobHeader>(bytes->data());
  JobRecord j;
  j.id = std::string(id);
  j.state = h->state();
  if (h->template_()) j.item_template = h->template_()->str();
  j.sampling = messages::read_sampling(h->sampling());
  j.check = messages::read_job_check(h->check());
  j.priority = h->priority();
  j.created_ms = h->created_ms();
  j.updated_ms = h->updated_ms();
  if (h->owner()) j.owner = h->owner()->str();
  if (h->annotation()) j.annotation = h->annotation()->str();
  store_.scan(Family::jobs, item_prefix('i', id), [&](std::string_view, std::string_view value) {
    j.items.emplace_back(value);
    return true;
  });
  if (static_cast<int32_t>(j.items.size()) != h->items())
    throw StoreError("job '" + j.id + "' lists " + std::to_string(h->items()) + " items; the store holds " +
                     std::to_string(j.items.size()));
  if (h->requests()) {
    store_.scan(Family::jobs, item_prefix('q', id), [&](std::string_view, std::string_view value) {
      j.requests.emplace_back(value);
      return true;
    });
    if (j.requests.size() != j.items.size())
      throw StoreError("job '" + j.id + "' lists " + std::to_string(j.items.size()) + " requests; the store holds " +
                       std::to_string(j.requests.size()));
  }
  store_.scan(Family::jobs, item_prefix('r', id), [&](std::string_view, std::string_view seen) {
    const std::string value(seen);  // aligned: FlatBuffers reads in place (a scan's value may sit anywhere)
    flatbuffers::Verifier rv(reinterpret_cast<const uint8_t*>(value.data()), value.size());
    if (!rv.VerifyBuffer<wire::JobItemResult>(nullptr)) throw StoreError("job '" + j.id + "': a result is corrupt");
    const auto r = messages::read_job_item(flatbuffers::GetRoot<wire::JobItemResult>(value.data()));
    j.results[r.index] = r;
    return true;
  });
  return j;
}

std::vector<std::string> JobBook::ids(std::string* damage) const {
  std::vector<std::string> out;
  ScanDamage blocks;
  store_.scan(Family::jobs, "h", [&](std::string_view key, std::string_view) {
    out.emplace_back(key.substr(1));
    return true;
  }, damage ? &blocks : nullptr);
  if (blocks) *damage = blocks.first + " (" + std::to_string(blocks.blocks) + " damaged blocks skipped)";
  return out;
}

namespace {

JobStamp decode_stamp(std::string_view id, std::string_view seen) {
  const std::string bytes(seen);  // aligned: FlatBuffers reads in place
  flatbuffers::Verifier v(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (!v.VerifyBuffer<store::JobHeader>(nullptr)) throw StoreError("job '" + std::string(id) + "': its header is corrupt");
  const auto* h = flatbuffers::GetRoot<store::JobHeader>(bytes.data());
  return {std::string(id), h->state(), h->updated_ms()};
}

}  // namespace

std::vector<JobStamp> JobBook::stamps(std::string_view after, size_t max) const {
  std::vector<JobStamp> out;
  store_.scan_after(Family::jobs, "h", after.empty() ? "" : job_header_key(after), [&](std::string_view k, std::string_view v) {
    try {
      out.push_back(decode_stamp(k.substr(1), v));
    } catch (const StoreError&) {
      // `troupe store check` reports it; retention leaves what it cannot read.
    }
    return out.size() < max;
  });
  return out;
}

std::optional<JobStamp> JobBook::stamp(std::string_view id) const {
  const auto bytes = store_.get(Family::jobs, job_header_key(id));
  if (!bytes) return std::nullopt;
  return decode_stamp(id, *bytes);
}

int64_t JobBook::erase(std::string_view id, Batch& b) const {
  int64_t bytes = 0;
  const std::string key = job_header_key(id);
  if (const auto header = store_.get(Family::jobs, key)) bytes += static_cast<int64_t>(key.size() + header->size());
  b.erase(Family::jobs, key);
  for (const char kind : {'i', 'q', 'r'})
    store_.scan(Family::jobs, item_prefix(kind, id), [&](std::string_view k, std::string_view v) {
      bytes += static_cast<int64_t>(k.size() + v.size());
      b.erase(Family::jobs, std::string(k));
      return true;
    });
  return bytes;
}

}  // namespace troupe::persistence
