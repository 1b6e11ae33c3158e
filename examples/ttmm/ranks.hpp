#pragma once
// The processes of a `ttmm train` run: under mpirun (built with MPI) the MPI world, otherwise one
// process. The library makes no MPI call (its consumers need no MPI); this is the only file of the
// example that does. Only the four collective operations the training driver needs are offered.

#include <cstdint>
#include <string>
#include <vector>

#ifdef TTMM_WITH_MPI
#include <mpi.h>
#endif

namespace ttmm_example {

/// This process's place among the ranks, and the collectives between them.
class Ranks {
 public:
  /// Joins the MPI world (when built with MPI; harmless without mpirun: a world of one).
  Ranks(int& argc, char**& argv) {
#ifdef TTMM_WITH_MPI
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
#else
    (void)argc;
    (void)argv;
#endif
  }
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;
  ~Ranks() {
#ifdef TTMM_WITH_MPI
    MPI_Finalize();
#endif
  }

  /// This process's rank, 0 .. size() - 1.
  int rank() const { return rank_; }
  /// Number of processes.
  int size() const { return size_; }
  /// Whether this is rank 0 (the one that embeds, clusters and finalises).
  bool leader() const { return rank_ == 0; }

  /// Waits until every rank gets here.
  void barrier() const {
#ifdef TTMM_WITH_MPI
    MPI_Barrier(MPI_COMM_WORLD);
#endif
  }

  /// Rank 0's `v` (size and contents) on every rank.
  void broadcast(std::vector<std::int64_t>& v) const {
#ifdef TTMM_WITH_MPI
    std::int64_t n = std::int64_t(v.size());
    MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    v.resize(std::size_t(n));
    if (n > 0) MPI_Bcast(v.data(), int(n), MPI_INT64_T, 0, MPI_COMM_WORLD);
#else
    (void)v;
#endif
  }

  /// Rank 0's message on every rank (an error to report, or empty).
  void broadcast(std::string& s) const {
#ifdef TTMM_WITH_MPI
    std::vector<std::int64_t> bytes(s.begin(), s.end());
    broadcast(bytes);
    s.assign(bytes.begin(), bytes.end());
#else
    (void)s;
#endif
  }

  /// The sum over the ranks of `n` (how many failed, how many experts were written), on every rank.
  std::int64_t sum(std::int64_t n) const {
#ifdef TTMM_WITH_MPI
    std::int64_t total = 0;
    MPI_Allreduce(&n, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    return total;
#else
    return n;
#endif
  }

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace ttmm_example
