// Shared checks for the seam's types.
#include "backends/backend.h"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace tf::backend {

namespace {
[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw core::InputError(where + ": " + what);
}
}  // namespace

void validate_chunk(OptimizerKind k, const OptimChunk& c, size_t alignment, const std::string& where) {
  const size_t n = c.param.count;
  struct Named {
    const char* name;
    const BufferView* b;
  };
  const bool two_states = core::state_count(k) == 2;
  std::vector<Named> present = {{"param", &c.param}, {"state1", &c.state1}, {"grad", &c.grad}};
  if (two_states) present.push_back({"state2", &c.state2});
  if (c.param_copy.dtype != DType::kNone || c.param_copy.data != nullptr || c.param_copy.count != 0)
    present.push_back({"param_copy", &c.param_copy});

  if (c.param.dtype != DType::kF32) fail(where, "param must be fp32");
  if (c.state1.dtype != DType::kF32) fail(where, "state1 must be fp32");
  if (two_states && c.state2.dtype != DType::kF32)
    fail(where, std::string(core::optimizer_name(k)) + " needs state2 (exp_avg_sq) as fp32");
  if (!two_states && (c.state2.data != nullptr || c.state2.count != 0))
    fail(where, std::string(core::optimizer_name(k)) + " has one state; state2 must be empty");
  if (c.grad.dtype == DType::kNone) fail(where, "grad dtype must be fp32, bf16 or fp16");
  if (c.param_copy.dtype == DType::kF32)
    fail(where, "param_copy must be bf16, fp16 or none (the fp32 master is updated in place)");

  for (const Named& b : present) {
    if (b.b->count != n) {
      std::ostringstream os;
      os << "buffer size mismatch: " << b.name << " has " << b.b->count << " elements, param has " << n;
      fail(where, os.str());
    }
    if (n > 0 && b.b->data == nullptr) fail(where, std::string(b.name) + " is null");
    const size_t align = std::max(alignment, core::dtype_bytes(b.b->dtype));
    if (reinterpret_cast<uintptr_t>(b.b->data) % align != 0) {
      std::ostringstream os;
      os << b.name << " pointer " << b.b->data << " is not aligned to " << align
         << " bytes; allocate with the backend or align the chunk start";
      fail(where, os.str());
    }
  }
  // Overlap: every written buffer must be disjoint from every other buffer.
  for (size_t i = 0; i < present.size(); ++i)
    for (size_t j = i + 1; j < present.size(); ++j) {
      const auto a0 = reinterpret_cast<uintptr_t>(present[i].b->data);
      const auto b0 = reinterpret_cast<uintptr_t>(present[j].b->data);
      const uintptr_t a1 = a0 + present[i].b->bytes(), b1 = b0 + present[j].b->bytes();
      if (n > 0 && a0 < b1 && b0 < a1)
        fail(where, std::string("buffers ") + present[i].name + " and " + present[j].name + " overlap");
    }
}

}  // namespace tf::backend
