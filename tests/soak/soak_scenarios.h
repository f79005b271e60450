// The soak's scenarios: what one step of a worker thread does, by name and
// weight, and the set a run enables (--scenarios).
#ifndef MATMUL_TESTS_SOAK_SOAK_SCENARIOS_H_
#define MATMUL_TESTS_SOAK_SOAK_SCENARIOS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace matmul::soak {

enum class Scenario {
  kProductInline,  // checked product, operands inline
  kProductShm,     // checked product on the worker's shm region
  kProductRing,    // the same through the worker's request ring
  kProductStream,  // checked products over one MatmulStream
  kMalformed,      // bad dtype, shape, strides, sizes, region references
  kUnparseable,    // a message that does not parse (unary and in a stream)
  kOversized,      // a message (or an answer) over --max_message_bytes
  kCancel,         // TryCancel while the product is in flight
  kDeadline,       // deadlines that pass before or while it runs
  kUnregister,     // UnregisterRegion while products on it are in flight
  kTruncate,       // ftruncate(0) of a registered segment while in use
  kStreamDrop,     // a MatmulStream cancelled with answers outstanding
  kRingDrop,       // a request ring detached with requests in its slots
  kKill,           // a holder process SIGKILLed with session/regions/ring
  kRingChaos,      // a ring's queue written out of sequence, slots corrupted
  kRingKill,       // a holder SIGKILLed with its ring busy and out of order
  kSharedWeight,   // products over another session's shared weight, withdrawn
  kSharedKill,     // the same while the weight's owner process is SIGKILLed
  kProductIpc,     // checked product on a cuda_ipc region (GPU only)
  kProductVmm,     // checked product on a cuda_vmm region (GPU only)
  kStreamBatch,    // stream-ordered products of one shape at once (GPU only)
};

struct ScenarioInfo {
  Scenario scenario;
  const char* name;
  // Relative frequency in the mix.
  int weight;
  // Part of "all" (the default); the others must be named.
  bool in_all;
};

absl::Span<const ScenarioInfo> AllScenarios();
const ScenarioInfo& InfoOf(Scenario scenario);

// "all", or names separated by commas, where "-name" removes one
// ("all,-truncate"). INVALID_ARGUMENT for an unknown name or an empty set.
absl::StatusOr<std::vector<Scenario>> ParseScenarios(absl::string_view text);

// "product_inline,product_shm,..." (for the report).
std::string ScenarioNames(absl::Span<const Scenario> scenarios);

}  // namespace matmul::soak

#endif  // MATMUL_TESTS_SOAK_SOAK_SCENARIOS_H_
