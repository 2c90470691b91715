#pragma once
// A tokenized request's tier route (service/cascade.h), for the request gate
// and the job runner alike.
#include <optional>
#include <string>

#include "service/admit_request.h"
#include "service/cascade.h"

namespace troupe::service {

// Sets a.route from its sampling's tier fields and the speculation the route
// implies; the reason (one line) when the request cannot have it. `tiers`
// null or empty: a server with one model.
std::optional<std::string> route_request(const TierTable* tiers, AdmitRequest& a);

}  // namespace troupe::service
