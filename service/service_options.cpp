#include "service/service_options.h"

#include <algorithm>
#include <stdexcept>

#include "messages/curve_auth.h"

namespace troupe::service {
namespace {

void refuse_if(bool wrong, const std::string& why) {
  if (wrong) throw std::invalid_argument(why);
}

// Without CURVE only loopback endpoints are served, unless the operator says --insecure.
void check_exposure(const ServiceOptions& o) {
  if (!o.server_key.empty() || o.insecure) return;
  refuse_if(!o.http.empty() && !messages::is_loopback_endpoint("tcp://" + o.http),
            "--http " + o.http + " is not a loopback address: serve it with --auth curve (bearer tokens from "
            "`troupe keygen --http-token`), or give --insecure to serve it to anyone who reaches it");
  for (const std::string& e : {o.listen, o.events})
    refuse_if(!e.empty() && !messages::is_loopback_endpoint(e),
              e + " is not a loopback endpoint: serve it with --auth curve (keys from `troupe keygen`), or give "
                  "--insecure to serve it to anyone who reaches it");
  refuse_if(!o.join_listen.empty() && !messages::is_loopback_endpoint(o.join_listen),
            "--join-listen " + o.join_listen + " is not a loopback endpoint: serve it with --auth curve (the workers' "
            "keys in --clients-dir), or give --insecure to let anyone who reaches it add a worker");
}

}  // namespace

void check_service_options(const ServiceOptions& o) {
  refuse_if(o.server_key.empty() != o.clients_dir.empty(),
            "--auth curve needs both --server-key (this server's .secret) and --clients-dir");
  check_exposure(o);
  refuse_if(!o.worker_key.empty() && o.server_key.empty(),
            "--worker-key needs --server-key: the pair this server shows workers");
  for (const std::string& endpoint : o.workers)
    refuse_if(std::count(o.workers.begin(), o.workers.end(), endpoint) > 1,
              "--worker " + endpoint + " is given twice; each worker serves one front end once");
  const bool draft = !o.draft_model_path.empty() || !o.draft_worker.empty();
  refuse_if(!o.draft_model_path.empty() && !o.draft_worker.empty(), "give a draft model or a draft worker, not both");
  refuse_if(!o.tier_paths.empty() && several_workers(o),
            "--tiers with several --worker (or --join-listen) is not supported yet: the first tier drafts for the "
            "last, and one draft model cannot serve several workers' sequences");
  refuse_if(draft && several_workers(o),
            "a draft model with several --worker (or --join-listen) is not supported yet (one draft model cannot "
            "serve several workers' sequences); --speculation ngram drafts on each worker");
  refuse_if(o.escalate_budget > 0 && o.tier_paths.empty(),
            "--escalate-budget needs --tiers: it is the share of requests the next tier takes");
  refuse_if(o.escalate_budget > 0 && o.escalate_hold <= 0,
            "--escalate-budget ranks held answers by their confidence; it needs --escalate-hold > 0");
  refuse_if(o.escalate_signal == HoldSignal::tail && o.escalate_hold <= 0,
            "--escalate-signal tail judges held tokens; it needs --escalate-hold > 0");
  // With tiers and no draft model, the first tier's model drafts.
  refuse_if(o.speculation.uses(SpeculationMode::draft) && !draft && o.tier_paths.empty(),
            "--speculation draft needs --draft-model or --draft-worker");
}

int32_t fitted_context(int32_t asked, int64_t model_context, int32_t kv_pages, int32_t page_size) {
  // A sequence can never hold more KV than the whole cache: admitting one
  // that could would stall it mid-prefill. The default shrinks to fit; an
  // explicit --context that cannot is the user's mistake, told in numbers.
  const int64_t pool = int64_t{kv_pages} * page_size;
  refuse_if(asked > pool, "--context " + std::to_string(asked) + " is more than the KV pool holds: " +
                              std::to_string(pool) + " tokens (" + std::to_string(kv_pages) + " pages of " +
                              std::to_string(page_size) + "); raise --kv-tokens or lower --context");
  if (asked > 0) return asked;
  return static_cast<int32_t>(std::min<int64_t>({model_context, 8192, pool}));
}

}  // namespace troupe::service
