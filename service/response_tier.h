#pragma once
// The response cache tier's decisions: which requests it may answer, under
// what key, and the frames that answer one from a stored answer.
//
// An answer is the request's alone when it is greedy (temperature 0) or
// sampled with a seed, one sample, without logprobs (not stored): then the
// same model file, prompt tokens and sampling fields give the same tokens,
// and the cache may answer. The key is a BLAKE2b-256 hash of all of them,
// plus everything else that shapes the answer (ignore_eos, speculation:
// exact speculation keeps greedy tokens, but a seeded sampled stream may
// differ by how many tokens a step drew). Sessions are never cached (their
// turns are stored with the session and change its history).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/speculation/controller.h"
#include "messages/client_frames.h"
#include "persistence/response_cache.h"

namespace troupe::service {

struct CacheableRequest {
  uint64_t model = 0;  // file_fingerprint of the model that answers
  std::span<const int32_t> prompt;
  const messages::SamplingFields* sampling = nullptr;
  bool ignore_eos = false;
  bool logprobs = false;
  int32_t samples = 1;
  SpeculationMode speculation = SpeculationMode::off;
  std::string route;  // cascade tiers: service/cascade.h route_key(); empty: none
  bool route_learned = false;  // auto: the choice depends on what the router has learned
};

// Why a request asking for the cache cannot use it; empty when it can.
std::string response_cache_refusal(const CacheableRequest& r);
// Its key (32 bytes), when response_cache_refusal() is empty.
std::optional<std::string> response_cache_key(const CacheableRequest& r);

// A hit as the client sees it: Accepted, one Tokens frame with the whole
// answer, and a Done (response_cache = hit, every prompt token cached,
// `elapsed_ms` from acceptance for each timing).
std::vector<messages::Bytes> cached_answer_frames(uint64_t client_id, const persistence::CachedAnswer& a, double elapsed_ms);

}  // namespace troupe::service
