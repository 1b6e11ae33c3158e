#pragma once
// Backend<D>, the kernels of device D, declared at the core floor: tensors and ops name it for any
// device, and each backend (backend/cpu, backend/cuda) specialises it. What a specialisation must
// provide is the `Backend` concept in backend/backend.hpp.

namespace ttmoe {

/// Kernels of device D; specialised per device. The primary template exists only to say which header
/// was forgotten when a TU uses a device whose backend it never included.
template <class D>
struct Backend {
  static_assert(sizeof(D) == 0,
                "ttmoe: no Backend<D> for this device in this translation unit: include "
                "ttmoe/ttmoe.hpp or ttmoe/backend/cpu/backend.hpp (cpu), ttmoe/cuda.hpp (cuda), or "
                "ttmoe/backend/cuda/thrust_host.hpp / thrust_omp.hpp");
};

}  // namespace ttmoe
