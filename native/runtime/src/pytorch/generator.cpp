// The infini random number generator: a Philox seed and offset per
// generator, one default per device (torch_infini/runtime/generator.h).
#include "torch_infini/runtime/generator.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "torch_infini/runtime/stream.h"

namespace torch_infini {
namespace {

constexpr size_t kStateBytes = 2 * sizeof(uint64_t);  // seed, offset

c10::DeviceIndex resolve(c10::DeviceIndex device) {
  // -1: the current device; any index the backend lacks (-2 ... included,
  // a wrapped index) raises torch.AcceleratorError, as for every device use.
  const int index = device == -1 ? currentDevice() : device;
  checkDeviceIndex(index);
  return static_cast<c10::DeviceIndex>(index);
}

}  // namespace

InfiniGenerator::InfiniGenerator(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void InfiniGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

void InfiniGenerator::set_offset(uint64_t offset) {
  TORCH_CHECK(offset % 4 == 0, "infini generator: the offset must be a multiple of 4, got ",
              offset);
  offset_ = offset;
}

uint64_t InfiniGenerator::get_offset() const { return offset_; }

uint64_t InfiniGenerator::current_seed() const { return seed_; }

uint64_t InfiniGenerator::seed() {
  const uint64_t fresh = c10::detail::getNonDeterministicRandom(/*is_cuda=*/false);
  set_current_seed(fresh);
  return fresh;
}

void InfiniGenerator::set_state(const c10::TensorImpl& new_state) {
  at::detail::check_rng_state(new_state);
  TORCH_CHECK(static_cast<size_t>(new_state.numel()) == kStateBytes,
              "infini generator: RNG state must be ", kStateBytes,
              " bytes (seed and offset, from get_rng_state()), got ", new_state.numel());
  uint64_t state[2];
  std::memcpy(state, new_state.data(), kStateBytes);
  TORCH_CHECK(state[1] % 4 == 0, "infini generator: the state's offset must be a multiple of 4");
  seed_ = state[0];
  offset_ = state[1];
}

c10::intrusive_ptr<c10::TensorImpl> InfiniGenerator::get_state() const {
  auto state = at::detail::empty_cpu({static_cast<int64_t>(kStateBytes)}, at::kByte, std::nullopt,
                                     std::nullopt, std::nullopt, std::nullopt);
  const uint64_t values[2] = {seed_, offset_};
  std::memcpy(state.data_ptr(), values, kStateBytes);
  return state.getIntrusivePtr();
}

std::pair<uint64_t, uint64_t> InfiniGenerator::philoxState(uint64_t counters) {
  const uint64_t offset = offset_;
  offset_ += ((counters + 3) / 4) * 4;
  return {seed_, offset};
}

InfiniGenerator* InfiniGenerator::clone_impl() const {
  auto* copy = new InfiniGenerator(device().index(), seed_);
  copy->offset_ = offset_;
  return copy;
}

const at::Generator& defaultGenerator(c10::DeviceIndex device) {
  static std::once_flag once;
  static std::vector<at::Generator>* generators = nullptr;  // leaked: outlives static destructors
  std::call_once(once, [] {
    generators = new std::vector<at::Generator>();
    for (int d = 0; d < deviceCount(); ++d)
      generators->push_back(at::make_generator<InfiniGenerator>(static_cast<c10::DeviceIndex>(d)));
  });
  return (*generators)[static_cast<size_t>(resolve(device))];
}

at::Generator newGenerator(c10::DeviceIndex device) {
  return at::make_generator<InfiniGenerator>(resolve(device));
}

}  // namespace torch_infini
