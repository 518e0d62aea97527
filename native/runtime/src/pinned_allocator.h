// The caching pinned host allocator (see pinned_allocator.cpp).
#pragma once

#include <ATen/core/CachingHostAllocator.h>

namespace torch_infini {

at::HostAllocator& pinnedHostAllocator();

}  // namespace torch_infini
