#include "service/bearer_token.h"

namespace troupe::service {

std::string_view bearer_token(std::string_view h) {
  constexpr std::string_view kScheme = "bearer";
  const auto blank = [](char c) { return c == ' ' || c == '\t'; };
  while (!h.empty() && blank(h.front())) h.remove_prefix(1);
  while (!h.empty() && blank(h.back())) h.remove_suffix(1);
  if (h.size() <= kScheme.size() || !blank(h[kScheme.size()])) return {};
  for (size_t i = 0; i < kScheme.size(); ++i)
    if ((h[i] | 0x20) != kScheme[i]) return {};
  h.remove_prefix(kScheme.size());
  while (!h.empty() && blank(h.front())) h.remove_prefix(1);
  return h.find_first_of(" \t") == std::string_view::npos ? h : std::string_view{};
}

}  // namespace troupe::service
