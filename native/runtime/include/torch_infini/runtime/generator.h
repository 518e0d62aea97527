// The infini random number generator, one default per device and any number
// made with torch.Generator(device="infini").
//
// Counter-based, as CUDA's: the state is a 64-bit seed and a 64-bit offset
// into the Philox-4x32-10 stream that seed selects. A random operator takes
// (seed, offset) under the generator's mutex when it is enqueued and moves
// the offset past the counter values it consumes (philoxState), so its
// numbers depend only on seed, offset, shape and arguments: never on
// threads, streams or how the work is split. get_state()/set_state() use
// CUDA's layout: 16 bytes, the seed then the offset, little-endian.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>
#include <utility>

namespace torch_infini {

class InfiniGenerator final : public c10::GeneratorImpl {
 public:
  explicit InfiniGenerator(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;  // the offset restarts at 0
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;  // a non-deterministic seed, set and returned
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The (seed, offset) an operator draws from; the offset then moves past
  // `counters` Philox counter values (each yields four 32-bit numbers),
  // rounded up to a multiple of 4 as CUDA's does. Call with mutex_ held.
  std::pair<uint64_t, uint64_t> philoxState(uint64_t counters);

 private:
  InfiniGenerator* clone_impl() const override;

  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The default generator of `device` (-1: the current device).
const at::Generator& defaultGenerator(c10::DeviceIndex device);
// A new generator of `device` (-1: the current device), default-seeded.
at::Generator newGenerator(c10::DeviceIndex device);

}  // namespace torch_infini
