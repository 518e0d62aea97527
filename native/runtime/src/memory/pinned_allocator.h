// The caching pinned host allocator (see pinned_allocator.cpp).
#pragma once

#include <ATen/core/CachingHostAllocator.h>

namespace torch_infini {

at::HostAllocator& pinnedHostAllocator();

// record_event for the block holding `ptr` (found by address); false when
// no pinned block holds it.
bool recordPinnedUseAt(const void* ptr, c10::Stream stream);

}  // namespace torch_infini
