// Public C++ API of libtorch_infini for LibTorch applications.
//
// Linking libtorch_infini registers the `infini` device (PrivateUse1) with
// PyTorch. Call init() once before creating tensors: it names the device
// "infini" (so c10::Device("infini:0") parses) and initializes the backend.
#pragma once

#include <string>
#include <vector>

namespace torch_infini {

// Selects the backend ("" means TORCH_INFINI_BACKEND, else "auto") and
// initializes it. Throws c10::Error when the backend cannot be served.
void init(const std::string& backend = "");

// The selected backend ("host", "cpu", "nvidia", ...); initializes.
std::string backend();

// Backends compiled into this build besides "auto".
std::vector<std::string> compiledBackends();

}  // namespace torch_infini
