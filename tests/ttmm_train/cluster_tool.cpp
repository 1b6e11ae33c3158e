// Clusters the embeddings of a safetensors file with ttmm::cluster_embeddings, for the NumPy
// reference check (clustering_numpy_check.py):
//   ttmm_cluster_tool IN.safetensors K OUT.safetensors
// IN holds "embeddings" [N, d] F32; OUT gets "assignment" [N] I64, "centroids" [K, d] F32 and
// "sizes" [K] I64. A ClusteringError is printed and gives status 1.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <vector>

#include "ttmoe/io/safetensors_file.hpp"
#include "ttmoe/io/safetensors_writer.hpp"
#include "ttmoe/ttmm/clustering.hpp"
#include "ttmoe/ttmoe.hpp"

int main(int argc, char** argv) {
  using namespace ttmoe;
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s IN.safetensors K OUT.safetensors\n", argv[0]);
    return 2;
  }
  try {
    io::SafetensorsFile in(argv[1]);
    const auto& info = in.info("embeddings");
    std::vector<float> e(info.numel());
    in.read_as<float>("embeddings", std::span<float>(e));
    const auto E = Tensor<float, DynShape<2>>::from_host(DynShape<2>(info.shape.at(0), info.shape.at(1)), e);
    const auto c = ttmm::cluster_embeddings(E, index_t(std::atoll(argv[2])));
    io::SafetensorsWriter w;
    const auto cent = c.centroids.to_vector();
    w.add("assignment", std::span<const std::int64_t>(c.assignment), {std::int64_t(c.assignment.size())});
    w.add("centroids", std::span<const float>(cent), {std::int64_t(c.centroids.extent(0)), std::int64_t(c.centroids.extent(1))});
    w.add("sizes", std::span<const std::int64_t>(c.sizes), {std::int64_t(c.sizes.size())});
    w.write(argv[3]);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "ttmm_cluster_tool: error: %s\n", ex.what());
    return 1;
  }
  return 0;
}
