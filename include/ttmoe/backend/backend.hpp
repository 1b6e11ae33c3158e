#pragma once
// Backend<D>: the kernels a device provides (fused elementwise execution, reductions, GEMM, small
// primitives). Ops above this layer are written once and call Backend<D>; each device specialises it
// (backend/cpu for the host, backend/cuda for NVIDIA GPUs).

namespace ttmoe {
/// Kernels of device D; specialised per device.
template <class D>
struct Backend;
}  // namespace ttmoe
