// Stored files (persistence/files.h), as the HTTP Batch API uses them: put
// synced and read back after reopening, their owner's alone, listed per
// client, deleted whole.
#include <catch2/catch.hpp>

#include <string>

#include "messages/client_validation.h"
#include "messages/file_frames.h"
#include "persistence/files.h"
#include "persistence/store.h"
#include "tests/persistence/temp_dir.h"

using namespace troupe;
using namespace troupe::persistence;

namespace {

const Principal kAlice{"alice", false}, kBob{"bob", false}, kAdmin{"root", true};

// The answer's body, kept with the bytes it points into.
struct Answer {
  messages::Bytes bytes;
  const wire::Response* r;
  explicit Answer(messages::Bytes b) : bytes(std::move(b)), r(messages::check_response(bytes)) { REQUIRE(r); }
  wire::ErrorCode error() const { return r->body_as_Error() ? r->body_as_Error()->code() : wire::ErrorCode::none; }
};

}  // namespace

TEST_CASE("a file is stored with its name, bytes and owner, and reads back after reopening", "[persistence]") {
  test::TempDir dir("files");
  std::string id;
  const std::string data("line one\n\0line two\n", 19);
  {
    Store store(dir.path);
    Answer put(FileBook(store).answer(messages::put_file_request(3, "batch", "x.jsonl", data), kAlice, 5000));
    const auto* info = put.r->body_as_FileInfo();
    REQUIRE(info);
    id = info->file_id()->str();
    CHECK(id.rfind("file-", 0) == 0);
    CHECK(info->bytes() == 19);
    CHECK(info->owner()->str() == "alice");
    CHECK(put.r->client_request_id() == 3);
  }
  Store store(dir.path);
  FileBook files(store);
  Answer whole(files.answer(messages::get_file_request(4, id, true), kAlice, 0));
  REQUIRE(whole.r->body_as_FileInfo());
  CHECK(std::string(whole.r->body_as_FileInfo()->data()->begin(), whole.r->body_as_FileInfo()->data()->end()) == data);
  CHECK(whole.r->body_as_FileInfo()->created_ms() == 5000);
  CHECK(whole.r->body_as_FileInfo()->filename()->str() == "x.jsonl");
  Answer info(files.answer(messages::get_file_request(5, id, false), kAlice, 0));
  CHECK_FALSE(info.r->body_as_FileInfo()->data());  // without content: the record alone
}

TEST_CASE("a file is its owner's: others neither read, list nor delete it, an admin does", "[persistence]") {
  test::TempDir dir("files");
  Store store(dir.path);
  FileBook files(store);
  const std::string a = Answer(files.answer(messages::put_file_request(1, "batch", "a", "x"), kAlice, 0))
                            .r->body_as_FileInfo()->file_id()->str();
  Answer(files.answer(messages::put_file_request(2, "batch", "b", "y"), kBob, 0));
  CHECK(Answer(files.answer(messages::get_file_request(3, a, true), kBob, 0)).error() == wire::ErrorCode::forbidden);
  CHECK(Answer(files.answer(messages::delete_file_request(4, a), kBob, 0)).error() == wire::ErrorCode::forbidden);
  CHECK(Answer(files.answer(messages::list_files_request(5), kBob, 0)).r->body_as_FileList()->files()->size() == 1);
  CHECK(Answer(files.answer(messages::list_files_request(6), kAdmin, 0)).r->body_as_FileList()->files()->size() == 2);
  CHECK(Answer(files.answer(messages::get_file_request(7, a, false), kAdmin, 0)).r->body_as_FileInfo());
  CHECK(Answer(files.answer(messages::delete_file_request(8, a), kAlice, 0)).r->body_type() == wire::ResponseBody::Ack);
  CHECK(Answer(files.answer(messages::get_file_request(9, a, false), kAlice, 0)).error() == wire::ErrorCode::unknown_job);
  CHECK(Answer(files.answer(messages::delete_file_request(10, a), kAlice, 0)).error() == wire::ErrorCode::unknown_job);
  int keys = 0;  // bob's record and bytes, nothing of alice's
  store.scan(Family::jobs, "", [&](std::string_view, std::string_view) { return ++keys, true; });
  CHECK(keys == 2);
}
