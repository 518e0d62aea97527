// Embedding torch-infini in a LibTorch application: initialize the backend,
// create tensors on infini:0, copy them back and check the values.
#include <torch/torch.h>
#include <torch_infini/torch_infini.h>

#include <cstdio>

int main() {
  torch_infini::init();  // TORCH_INFINI_BACKEND or auto
  std::printf("torch-infini backend: %s\n", torch_infini::backend().c_str());

  const torch::Device device("infini:0");
  torch::Tensor src = torch::arange(24, torch::kFloat32).reshape({2, 3, 4});

  // Seed example: empty on the device, copy in, copy back out.
  torch::Tensor x = torch::empty(src.sizes(), src.options().device(device));
  x.copy_(src);
  torch::Tensor out = torch::empty_like(src);
  out.copy_(x);

  // A strided view on the device and a dtype-converting copy back.
  torch::Tensor permuted = x.permute({2, 0, 1}).cpu();
  torch::Tensor as_double = x.to(torch::kCPU, torch::kFloat64);

  bool ok = x.device() == device && torch::equal(out, src) &&
            torch::equal(permuted, src.permute({2, 0, 1})) &&
            torch::equal(as_double, src.to(torch::kFloat64)) && x[1][2][3].item<float>() == 23.0f;
  std::printf("values on %s match the CPU: %s\n", device.str().c_str(), ok ? "yes" : "NO");
  return ok ? 0 : 1;
}
