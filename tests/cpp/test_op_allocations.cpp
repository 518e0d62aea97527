// Heap allocations per operator on the host device with inline streams: an
// operator allocates no more than the same operator on plain CPU tensors
// (its output's TensorImpl and storage; the caching allocator serves the
// memory itself), and in-place and out= variants allocate nothing. Counted
// by replacing the global operator new for this executable.
#include <ATen/ATen.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <new>
#include <vector>

#include "check.h"
#include "torch_infini/torch_infini.h"

namespace {

thread_local bool counting = false;
std::atomic<long> allocations{0};

void* countedAlloc(std::size_t n, std::size_t alignment) {
  if (counting) allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = nullptr;
  if (alignment <= alignof(std::max_align_t)) {
    p = std::malloc(n == 0 ? 1 : n);
  } else if (posix_memalign(&p, alignment, n == 0 ? 1 : n) != 0) {
    p = nullptr;
  }
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t n) { return countedAlloc(n, 0); }
void* operator new[](std::size_t n) { return countedAlloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) {
  return countedAlloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return countedAlloc(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

constexpr int kIterations = 100;

// Allocations per call of `op`, after warm-up calls (first-use caches).
double perCall(const std::function<void()>& op) {
  for (int i = 0; i < 10; ++i) op();
  allocations = 0;
  counting = true;
  for (int i = 0; i < kIterations; ++i) op();
  counting = false;
  return static_cast<double>(allocations.load()) / kIterations;
}

struct Operands {
  at::Tensor a, b, out;
};

using MakeOperands = std::function<Operands(c10::DeviceType, at::ScalarType)>;

struct Case {
  const char* name;
  std::function<void(Operands&)> op;
  bool float_only = false;
};

// Every case allocates on infini at most what it allocates on plain CPU
// tensors (the CPU's data buffers come from posix_memalign, not operator
// new, so both sides count tensor objects and bookkeeping only); `limit`,
// when not negative, bounds the infini count too.
void compareWithCpu(const MakeOperands& make, std::initializer_list<at::ScalarType> dtypes,
                    const std::vector<Case>& cases, double limit) {
  for (at::ScalarType dtype : dtypes) {
    Operands cpu = make(c10::DeviceType::CPU, dtype);
    Operands dev = make(c10::DeviceType::PrivateUse1, dtype);
    for (const Case& c : cases) {
      if (c.float_only && dtype != at::kFloat) continue;
      const double on_cpu = perCall([&] { c.op(cpu); });
      const double on_infini = perCall([&] { c.op(dev); });
      std::printf("# %-20s %-5s infini %.2f, cpu %.2f allocations per call\n", c.name,
                  c10::toString(dtype), on_infini, on_cpu);
      CHECK(on_infini <= on_cpu);
      CHECK(limit < 0 || on_infini <= limit);
    }
  }
}

// Two 1000-element operands and an output.
Operands vectors(c10::DeviceType device, at::ScalarType dtype) {
  const auto options = at::TensorOptions().device(device).dtype(dtype);
  return {at::ones({1000}, options), at::ones({1000}, options), at::empty({1000}, options)};
}

// A [32, 32] matrix, a [32] bias and a [32, 32] output.
Operands matrices(c10::DeviceType device, at::ScalarType dtype) {
  const auto options = at::TensorOptions().device(device).dtype(dtype);
  return {at::ones({32, 32}, options), at::ones({32}, options), at::empty({32, 32}, options)};
}

void outOfPlaceOperatorsAllocateOnlyTheirOutput() {
  compareWithCpu(vectors, {at::kFloat, at::kLong},
                 {
                     {"empty_like", [](Operands& t) { at::empty_like(t.a); }},
                     {"add", [](Operands& t) { at::add(t.a, t.b); }},
                     {"add, alpha 2", [](Operands& t) { at::add(t.a, t.b, 2); }},
                     {"mul", [](Operands& t) { at::mul(t.a, t.b); }},
                     {"relu", [](Operands& t) { at::relu(t.a); }},
                     {"silu", [](Operands& t) { at::silu(t.a); }, /*float_only=*/true},
                 },
                 /*limit=*/-1);
}

void inPlaceAndOutVariantsAllocateNothing() {
  compareWithCpu(vectors, {at::kFloat, at::kLong},
                 {
                     {"add_", [](Operands& t) { t.a.add_(t.b); }},
                     {"mul_", [](Operands& t) { t.a.mul_(t.b); }},
                     {"add.out", [](Operands& t) { at::add_out(t.out, t.a, t.b); }},
                     {"mul.out", [](Operands& t) { at::mul_out(t.out, t.a, t.b); }},
                     {"relu_", [](Operands& t) { t.a.relu_(); }},
                     {"copy_", [](Operands& t) { t.out.copy_(t.a); }},
                     {"zero_", [](Operands& t) { t.out.zero_(); }},
                     {"fill_", [](Operands& t) { t.out.fill_(3); }},
                 },
                 /*limit=*/0);
}

// Not rms_norm: its host reference kernel runs PyTorch's CPU composite and
// copies the result into the device output.
void matrixProductsAllocateNoMoreThanOnCpu() {
  compareWithCpu(matrices, {at::kFloat},
                 {
                     {"mm", [](Operands& t) { at::mm(t.a, t.a); }},
                     {"addmm", [](Operands& t) { at::addmm(t.out, t.a, t.a); }},
                     {"linear (bias [32])", [](Operands& t) { at::linear(t.a, t.a, t.b); }},
                 },
                 /*limit=*/-1);
  compareWithCpu(matrices, {at::kFloat},
                 {{"mm.out", [](Operands& t) { at::mm_out(t.out, t.a, t.a); }}}, /*limit=*/0);
}

}  // namespace

int main() {
  // Asynchronous host streams queue each task (a heap allocation of its
  // own): this test measures the operator path with inline streams.
  unsetenv("TORCH_INFINI_HOST_ASYNC");
  torch_infini::init("host");
  return runTests({
      {"out-of-place operators allocate only their output",
       outOfPlaceOperatorsAllocateOnlyTheirOutput},
      {"in-place and out= variants allocate nothing", inPlaceAndOutVariantsAllocateNothing},
      {"matrix products allocate no more than on the CPU", matrixProductsAllocateNoMoreThanOnCpu},
  });
}
