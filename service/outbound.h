#pragma once
// What the scheduler's decisions send out, in order, for its actor to
// deliver: frames to clients (or to the job runner, for the server's own
// requests), finished session turns to make durable, and the KV tiers'
// traffic (spills to the store, preempted pages to host memory and back).
// The scheduler never sends anything itself, so its tests read this.
#include <cstdint>
#include <string>
#include <vector>

#include "messages/client_frames.h"
#include "persistence/response_cache.h"
#include "persistence/session_turns.h"
#include "service/admit_request.h"
#include "service/cascade.h"

namespace troupe::service {

struct Reply {
  std::string peer;  // a client connection, or an internal_peer() (admit_request.h)
  uint64_t client_id = 0;
  messages::Bytes bytes;
};

// A preempted sequence's computed full pages, lossless (KvPageCodec::fp16),
// on their way to host memory or back.
struct SwappedPages {
  uint64_t sequence = 0;
  std::vector<int32_t> tokens;     // the full pages' tokens
  std::vector<std::string> data;   // one page each
  int64_t bytes() const;
};

// A session whose turn ended: its pages stay cached until it is idle.
struct SessionPages {
  std::string session_id;
  std::vector<int32_t> tokens;
};

struct Outbound {
  std::vector<Reply> replies;
  std::vector<persistence::SessionCommit> commits;  // durable first, then their Done
  std::vector<std::string> released_sessions;       // turns that ended unsaved
  std::vector<persistence::KvSpill> spills;         // to the store
  std::vector<SwappedPages> swap_outs;              // to host memory
  std::vector<uint64_t> swap_fetches;               // their pages back, please (answer: swap_arrived)
  std::vector<uint64_t> swap_drops;                 // no longer needed
  std::vector<SessionPages> idle_sessions;          // ended a turn: pages cached until idle
  std::vector<std::string> active_sessions;         // began a turn: not idle any more
  struct AnswerToCache {
    std::string key;
    persistence::CachedAnswer answer;
  };
  std::vector<AnswerToCache> cache_answers;  // finished answers for the response cache tier
  // Cascade tiers (service/cascade.h): requests handed to the next tier
  // mid-stream; cancels of them that came here after they left; requests
  // that left this tier for good (what they teach `auto`).
  std::vector<AdmitRequest> escalations;
  struct Cancel {
    std::string peer;
    uint64_t request_id = 0, target = 0;
  };
  std::vector<Cancel> moved_cancels;
  struct Ended {
    std::string peer;
    uint64_t client_id = 0;
    RouteOutcome outcome;
  };
  std::vector<Ended> ended;
  // Failover: the worker was lost (-1) or is back (+1) since the last take.
  int8_t worker = 0;

  bool empty() const {
    return replies.empty() && commits.empty() && released_sessions.empty() && spills.empty() && swap_outs.empty() &&
           swap_fetches.empty() && swap_drops.empty() && idle_sessions.empty() && active_sessions.empty() &&
           cache_answers.empty() && escalations.empty() && moved_cancels.empty() && ended.empty() && worker == 0;
  }
};

}  // namespace troupe::service
