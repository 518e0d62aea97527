// Maps the host device's memory twice in discrete mode: no access at the
// address PyTorch sees, read-write at the kernel view (discrete_memory.h).
#include "providers/host/discrete_memory.h"

#include <c10/util/Exception.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <iterator>

namespace torch_infini::runtime {

std::atomic<uintptr_t> discrete_device_begin{0};
std::atomic<uintptr_t> discrete_device_size{0};

namespace {

size_t pageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t roundUp(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

// Maps [address, address + bytes) anew: read-write zero pages, or no access
// (which also returns the pages' memory).
bool remap(uintptr_t address, size_t bytes, int protection) {
  void* p = mmap(reinterpret_cast<void*>(address), bytes, protection,
                 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p != MAP_FAILED;
}

// ------------------------------------------------ a host access, reported

struct sigaction previous_segv;
struct sigaction previous_bus;

void writeAll(const char* text, size_t size) {
  while (size > 0) {
    const ssize_t n = write(STDERR_FILENO, text, size);
    if (n <= 0) return;
    text += n;
    size -= static_cast<size_t>(n);
  }
}

template <size_t N>
void writeText(const char (&text)[N]) {
  writeAll(text, N - 1);
}

// Async-signal-safe: no allocation, no stdio.
void writeHex(uintptr_t value) {
  char digits[2 + 2 * sizeof(uintptr_t)];
  size_t n = sizeof(digits);
  do {
    digits[--n] = "0123456789abcdef"[value & 0xF];
    value >>= 4;
  } while (value != 0 && n > 2);
  digits[--n] = 'x';
  digits[--n] = '0';
  writeAll(digits + n, sizeof(digits) - n);
}

void onFault(int signal, siginfo_t* info, void* /*context*/) {
  // A fault the kernel raised (not a signal sent) at a device address.
  if (info != nullptr && info->si_code > 0 && isDiscreteDeviceAddress(info->si_addr)) {
    writeText("\ninfini: host code read or wrote device memory at address ");
    writeHex(reinterpret_cast<uintptr_t>(info->si_addr));
    writeText(
        " (the 'host' backend in discrete mode, TORCH_INFINI_HOST_MEMORY=discrete, keeps "
        "device memory out of the host's reach, as an accelerator does: only copies and "
        "device kernels reach it; move the tensor to the CPU to read it)\n");
  }
  // Whoever handled the signal before (Python's faulthandler, or the
  // default action) takes it: the access runs again and faults again.
  sigaction(signal, signal == SIGSEGV ? &previous_segv : &previous_bus, nullptr);
}

void installFaultReport() {
  static const bool installed = [] {
    struct sigaction action = {};
    action.sa_sigaction = onFault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &previous_segv);
    sigaction(SIGBUS, &action, &previous_bus);
    return true;
  }();
  (void)installed;
}

}  // namespace

DiscreteMemory::DiscreteMemory(size_t capacity) {
  TORCH_CHECK(discrete_device_begin.load() == 0, "infini: one discrete host memory per process");
  half_ = roundUp(capacity == 0 ? pageSize() : capacity, pageSize());
  void* base =
      mmap(nullptr, 2 * half_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  TORCH_CHECK(base != MAP_FAILED, "infini: cannot reserve ", 2 * half_,
              " bytes of address space for the host device's discrete memory");
  base_ = reinterpret_cast<uintptr_t>(base);
  free_.emplace(0, half_);
  discrete_device_size.store(half_);
  discrete_device_begin.store(base_);
  installFaultReport();
}

DiscreteMemory::~DiscreteMemory() {
  discrete_device_begin.store(0);
  discrete_device_size.store(0);
  munmap(reinterpret_cast<void*>(base_), 2 * half_);
}

void* DiscreteMemory::allocate(size_t bytes) {
  const size_t size = roundUp(bytes == 0 ? 1 : bytes, pageSize());
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {  // first fit
    if (it->second < size) continue;
    const uintptr_t offset = it->first;
    if (!remap(base_ + half_ + offset, size, PROT_READ | PROT_WRITE)) return nullptr;
    const size_t rest = it->second - size;
    free_.erase(it);
    if (rest != 0) free_.emplace(offset + size, rest);
    used_.emplace(offset, size);
    return reinterpret_cast<void*>(base_ + offset);
  }
  return nullptr;
}

void DiscreteMemory::release(void* device_address) {
  const uintptr_t offset = reinterpret_cast<uintptr_t>(device_address) - base_;
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = used_.find(offset);
  TORCH_CHECK(found != used_.end(), "infini: release of an address discrete memory did not give");
  const size_t length = found->second;
  used_.erase(found);
  TORCH_CHECK(remap(base_ + half_ + offset, length, PROT_NONE),
              "infini: cannot return discrete device memory");
  // Back to the free ranges, merged with its neighbours.
  uintptr_t start = offset;
  size_t size = length;
  auto next = free_.lower_bound(offset);
  if (next != free_.begin()) {
    auto before = std::prev(next);
    if (before->first + before->second == start) {
      start = before->first;
      size += before->second;
      free_.erase(before);
    }
  }
  if (next != free_.end() && offset + length == next->first) {
    size += next->second;
    free_.erase(next);
  }
  free_.emplace(start, size);
}

}  // namespace torch_infini::runtime
