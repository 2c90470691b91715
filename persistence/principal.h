#pragma once
// Who is asking for a stored session or job, as the client socket
// authenticated it (messages/curve_auth.h): the client's name, and whether
// it may see and manage everyone's. Without authentication there is no
// ownership: every caller is an admin with no name. A record made without
// authentication has no owner; under authentication only admins reach it.
#include <string>

namespace troupe::persistence {

struct Principal {
  std::string name;
  bool admin = true;
  bool may_use(const std::string& owner) const { return admin || owner == name; }
};

}  // namespace troupe::persistence
