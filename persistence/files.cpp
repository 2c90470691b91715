#include "persistence/files.h"

#include <cstdio>
#include <optional>
#include <vector>

#include "messages/file_frames.h"
#include "messages/session_frames.h"

namespace troupe::persistence {
namespace {

std::string info_key(std::string_view id) { return std::string(1, 'f').append(id); }
std::string data_key(std::string_view id) { return std::string(1, 'c').append(id); }

std::optional<messages::FileFields> read_info(std::string_view seen) {
  const std::string bytes(seen);  // aligned: FlatBuffers reads in place
  flatbuffers::Verifier v(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (!v.VerifyBuffer<wire::FileInfo>(nullptr)) return std::nullopt;
  return messages::read_file_info(flatbuffers::GetRoot<wire::FileInfo>(bytes.data()));
}

std::string encode_info(const messages::FileFields& f) {
  // A FileInfo response's body table alone: the same layout as a listing's entry.
  flatbuffers::FlatBufferBuilder fbb(256);
  const auto id = fbb.CreateString(f.file_id);
  const auto name = fbb.CreateString(f.filename);
  const auto purpose = fbb.CreateString(f.purpose);
  const auto owner = f.owner.empty() ? 0 : fbb.CreateString(f.owner);
  fbb.Finish(wire::CreateFileInfo(fbb, id, f.bytes, f.created_ms, name, purpose, owner));
  return messages::finish_bytes(fbb);
}

}  // namespace

messages::Bytes FileBook::answer(const std::string& request, const Principal& who, int64_t unix_ms) {
  const auto* req = flatbuffers::GetRoot<wire::Request>(request.data());
  const uint64_t rid = req->client_request_id();
  // One file's record, or the error that answers instead.
  auto find = [&](const flatbuffers::String* id, messages::FileFields& out) -> std::optional<messages::Bytes> {
    const std::string fid = id ? id->str() : "";
    const auto bytes = store_.get(Family::jobs, info_key(fid));
    const auto info = bytes ? read_info(*bytes) : std::nullopt;
    if (!info) return messages::error_response(rid, wire::ErrorCode::unknown_job, "no file '" + fid + "'");
    if (!who.may_use(info->owner))
      return messages::error_response(rid, wire::ErrorCode::forbidden, "file '" + fid + "' belongs to another client");
    out = *info;
    return std::nullopt;
  };
  try {
    switch (req->body_type()) {
      case wire::RequestBody::PutFile: {
        const auto* p = req->body_as_PutFile();
        messages::FileFields f;
        char id[40];
        std::snprintf(id, sizeof id, "file-%016llx%08llx", static_cast<unsigned long long>(rng_()),
                      static_cast<unsigned long long>(rng_() & 0xffffffffull));
        f.file_id = id;
        f.bytes = static_cast<int64_t>(p->data()->size());
        f.created_ms = unix_ms;
        f.filename = p->filename() ? p->filename()->str() : "";
        f.purpose = p->purpose()->str();
        f.owner = who.name;
        Batch b;
        b.put(Family::jobs, info_key(f.file_id), encode_info(f));
        b.put(Family::jobs, data_key(f.file_id),
              std::string(reinterpret_cast<const char*>(p->data()->data()), p->data()->size()));
        store_.write(b, true);
        return messages::file_info_response(rid, f);
      }
      case wire::RequestBody::GetFile: {
        const auto* g = req->body_as_GetFile();
        messages::FileFields f;
        if (auto refused = find(g->file_id(), f)) return *refused;
        if (!g->content()) return messages::file_info_response(rid, f);
        const auto data = store_.get(Family::jobs, data_key(f.file_id));
        if (!data) return messages::error_response(rid, wire::ErrorCode::storage_failed, "file '" + f.file_id + "' lost its data");
        return messages::file_info_response(rid, f, *data);
      }
      case wire::RequestBody::DeleteFile: {
        messages::FileFields f;
        if (auto refused = find(req->body_as_DeleteFile()->file_id(), f)) return *refused;
        Batch b;
        b.erase(Family::jobs, info_key(f.file_id));
        b.erase(Family::jobs, data_key(f.file_id));
        store_.write(b, true);
        return messages::ack_response(rid, "deleted file " + f.file_id);
      }
      case wire::RequestBody::ListFiles: {
        std::vector<messages::FileFields> files;
        store_.scan(Family::jobs, "f", [&](std::string_view, std::string_view value) {
          if (auto f = read_info(value); f && who.may_use(f->owner)) files.push_back(std::move(*f));
          return true;
        });
        return messages::file_list_response(rid, files);
      }
      default: return messages::error_response(rid, wire::ErrorCode::internal, "not a file request");
    }
  } catch (const std::exception& e) {
    return messages::error_response(rid, wire::ErrorCode::storage_failed, e.what());
  }
}

}  // namespace troupe::persistence
