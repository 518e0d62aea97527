// Devices and streams of `infini` as PyTorch sees them (c10::Device,
// c10::Stream), mapped onto the selected DeviceRuntime.
//
// Stream ids: 0 is the per-device default stream; 1..kStreamPoolSize are
// pool streams created lazily and handed out round-robin, as CUDA does.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include "torch_infini/runtime/device_runtime.h"

namespace torch_infini {

constexpr c10::StreamId kStreamPoolSize = 32;

// Number of devices; 0 (never an exception) when the backend is unusable.
int deviceCount() noexcept;
// Throws torch.AcceleratorError naming the index and the count when out of
// range, as CUDA does for an invalid device ordinal.
void checkDeviceIndex(int device);
// The calling thread's current device (0 until set).
int currentDevice();
void setCurrentDevice(int device);
// Resolves -1 (meaning "current") to the current device and validates.
int resolveDevice(int device);

c10::Stream currentStream(int device = -1);
c10::Stream defaultStream(int device = -1);
c10::Stream streamFromPool(int device = -1);
// Makes `stream` current for its device on this thread; returns the old one.
c10::Stream exchangeStream(const c10::Stream& stream);
// The runtime handle behind a stream; validates device and id.
runtime::StreamHandle nativeStream(const c10::Stream& stream);
// Hot-path variants for a device index already known to be valid (the
// device of an existing infini tensor): no validation, no runtime lookup.
c10::StreamId currentStreamIdUnchecked(int device) noexcept;
runtime::StreamHandle currentNativeStreamUnchecked(int device);
runtime::StreamHandle nativeStreamUnchecked(int device, c10::StreamId id);

// Synchronizes every stream the backend created on `device`.
void synchronizeDevice(int device = -1);

}  // namespace torch_infini
