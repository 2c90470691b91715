// The fixed stack (CAF, ZeroMQ, FlatBuffers, RocksDB) as Debian ships it
// installs, links into one binary and works: one small real use of each.
#include <catch2/catch.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <flatbuffers/flatbuffers.h>
#include <rocksdb/db.h>

#include <filesystem>
#include <string>
#include <zmq.hpp>

TEST_CASE("a CAF actor answers a request") {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  // Spawned with an argument: CAF 0.17 dereferences an empty argument tuple
  // for argument-less function actors, which UBSan rightly reports.
  auto doubler = system.spawn([](int factor) -> caf::behavior { return {[=](int x) { return factor * x; }}; }, 2);
  caf::scoped_actor self{system};
  int answer = 0;
  self->request(doubler, caf::infinite, 21).receive([&](int r) { answer = r; }, [](caf::error&) {});
  CHECK(answer == 42);
}

TEST_CASE("a ZeroMQ DEALER and ROUTER exchange a message over inproc") {
  zmq::context_t ctx;
  zmq::socket_t router(ctx, zmq::socket_type::router);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  router.bind("inproc://stack-test");
  dealer.connect("inproc://stack-test");
  dealer.send(zmq::str_buffer("ping"), zmq::send_flags::none);
  zmq::message_t identity, body;
  REQUIRE(router.recv(identity));
  REQUIRE(router.recv(body));
  CHECK(body.to_string() == "ping");
}

TEST_CASE("a FlatBuffers buffer verifies and reads back") {
  flatbuffers::FlatBufferBuilder fbb;
  auto text = fbb.CreateString("hello");
  fbb.Finish(text);
  flatbuffers::Verifier verifier(fbb.GetBufferPointer(), fbb.GetSize());
  REQUIRE(verifier.Verify<flatbuffers::uoffset_t>(0));
  const auto* root = flatbuffers::GetRoot<flatbuffers::String>(fbb.GetBufferPointer());
  REQUIRE(verifier.VerifyString(root));
  CHECK(root->str() == "hello");
}

TEST_CASE("RocksDB writes durably and reads back") {
  auto dir = std::filesystem::temp_directory_path() / ("troupe-stack-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  REQUIRE(rocksdb::DB::Open(options, dir.string(), &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteOptions sync;
  sync.sync = true;
  REQUIRE(db->Put(sync, "key", "value").ok());
  std::string value;
  REQUIRE(db->Get(rocksdb::ReadOptions(), "key", &value).ok());
  CHECK(value == "value");
  db.reset();
  std::filesystem::remove_all(dir);
}
