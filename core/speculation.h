// Speculative CPU updates (docs/ARCHITECTURE.md, "Speculation"): which CPU layers update before the
// global norm is known, what their second state slot costs, and the per-step rule every executor of
// the plan (the CUDA engine, the functional simulator) applies: speculate into the spare slot, then
// commit by adopting it (the layer's slot index flips, no data moves) or redo the update in place.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/optim/optimizer.h"
#include "core/step.h"
#include "core/step_decision.h"
#include "core/twinflow.h"

namespace tf::core {

// Host bytes one element's second state slot takes: its fp32 master and states (AdamW: 12).
int64_t spare_slot_bytes_per_element(OptimizerKind k);

// The CPU layers of `split` that speculate under `cfg`, in backward order
// (the order their gradients land). None without clipping or loss scaling (the CPU updates do not wait
// for the norm then) or with speculation_bytes 0. Otherwise the CPU layers whose gradient lands while
// backward still runs, i.e. every one but layer 0 (its reduction is the last op of backward and the norm
// follows it at once: speculating it hides nothing) and among the first cfg.staging_slots CPU layers in
// backward order (a later one's D2H reuses a staging slot, so it waits for the commit of the slot's
// previous layer, after the norm: speculating it hides nothing either), taken in backward order while
// their spare slots fit in speculation_bytes (all of them with kSpeculationMax) and at most
// cfg.speculation_layers of them. So they are the tail of the CPU segment.
std::vector<int32_t> speculated_layers(const TwinFlowSplit& split, const StepConfig& cfg);

// The spare slots' place in the CPU segment: elements [begin, begin + elems) of the segment (the
// speculated layers' CPU parts, contiguous at the segment's end).
struct SpareRange {
  int64_t begin = 0;
  int64_t elems = 0;
  bool operator==(const SpareRange&) const = default;
};
SpareRange spare_range(const TwinFlowSplit& split, const std::vector<int32_t>& layers);

// Whether two steps' scalars are the same bits (then the same update produces the same bits).
bool same_bits(const StepScalars& a, const StepScalars& b);

// The per-step rule and each layer's current slot, as the CUDA engine and the functional simulator run
// them. Step t speculates when the plan has speculative ops and step t-1 was neither clipped nor skipped
// (step 1 speculates: nothing says it will clip). Its scalars are decide_step's with a zero norm and no
// non-finite element: exactly the scalars of a step that neither clips nor overflows (the clip
// coefficient enters only as grad_scale = coef / loss_scale, with coef = 1 there), at the loss scale and
// optimizer step known when the step begins. The commit compares them with the decided scalars bit for
// bit, so a committed layer holds what an in-place update would have written.
class Speculation {
 public:
  explicit Speculation(const StepPlan& plan);

  // At a step's start (`step` 1-based; `opt_step` the optimizer steps taken so far).
  void begin_step(const StepPolicy& policy, int step, double loss_scale, int64_t opt_step);
  bool active() const { return bet(step_).active; }  // the latest begun step runs its speculative ops
  const StepScalars& scalars() const { return bet(step_).scalars; }
  // A step's bet, kept until the step after next begins: with a carried tail (docs/ARCHITECTURE.md,
  // "Carrying the optimizer tail into the next step") step t's speculative ops and commits may run
  // after step t + 1 has begun, so they read their own step's bet, not the latest.
  struct Bet {
    bool active = false;  // the step runs its speculative ops
    StepScalars scalars;  // ... with these scalars
  };
  const Bet& bet(int step) const { return bets_[size_t(step) & 1]; }
  // The slot holding `layer`'s state: 0 the primary buffers, 1 the spare ones. Always 0 for a layer that
  // does not speculate.
  int slot(int32_t layer) const { return slot_[size_t(layer)]; }

  // A restore from a checkpoint (docs/ARCHITECTURE.md, "Checkpoints"): every layer's state goes back
  // to its primary slot (slot 0), where the restore then writes it, and the next step may speculate as
  // a first step does (the checkpoint does not say whether its last step clipped; the bits do not depend
  // on it). The spare slots' contents are dead: a speculative update writes all of a slot before a
  // commit adopts it. The step counters keep counting.
  void reset_slots();

  // What `layer`'s commit op does once the step is decided.
  enum class Commit : uint8_t {
    kAdopt,   // the speculative update stands: the layer's slot index has flipped
    kUpdate,  // update the current slot in place with the decided scalars (no speculation, or it failed)
    kSkip,    // the step is skipped (fp16 overflow): nothing changes
  };
  // `step`: the step the commit belongs to (the latest begun one when not given).
  Commit commit(int32_t layer, const StepDecision& d, int step);
  Commit commit(int32_t layer, const StepDecision& d) { return commit(layer, d, step_); }

  // At a step's end: what happened, and whether the next step may speculate.
  struct Outcome {
    bool speculated = false;  // the step ran its speculative ops
    bool held = false;        // ... and the decided scalars were the speculated ones (not skipped)
  };
  Outcome end_step(const StepDecision& d);

  bool planned() const { return !layers_.empty(); }
  const std::vector<int32_t>& layers() const { return layers_; }  // backward order
  int64_t speculated_steps() const { return speculated_steps_; }
  int64_t failed_steps() const { return failed_steps_; }

 private:
  bool held(const StepDecision& d, int step) const {
    return bet(step).active && !d.skip && same_bits(d.scalars, bet(step).scalars);
  }

  std::vector<int32_t> layers_;  // the plan's speculated layers, backward order
  std::vector<uint8_t> slot_;    // (L) each layer's current slot
  bool last_clean_ = true;       // the previous step was neither clipped nor skipped
  int step_ = 0;                 // the latest begun step
  std::array<Bet, 2> bets_;      // by step parity: the latest begun step's and the one before
  int64_t speculated_steps_ = 0, failed_steps_ = 0;
};

}  // namespace tf::core
