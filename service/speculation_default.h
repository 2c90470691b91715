#pragma once
// The server's speculation for requests that do not choose one (`serve
// --speculation`). By default the controller (auto) speculates greedy
// requests, whose tokens speculation never changes, and leaves sampled ones
// alone: with drafts a seeded sample's text would depend on what the server
// served before and on its load (docs/DECISIONS.md, "Speculation by default").
#include "engine/speculation/controller.h"

namespace troupe::service {

struct SpeculationDefault {
  SpeculationMode greedy = SpeculationMode::automatic;
  SpeculationMode sampled = SpeculationMode::off;

  static constexpr SpeculationDefault every(SpeculationMode m) { return {m, m}; }
  SpeculationMode of(float temperature) const { return temperature == 0.0f ? greedy : sampled; }
  bool uses(SpeculationMode m) const { return greedy == m || sampled == m; }
  bool operator==(const SpeculationDefault&) const = default;
};

}  // namespace troupe::service
