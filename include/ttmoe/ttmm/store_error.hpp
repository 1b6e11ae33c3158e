#pragma once
// The error of an expert store that cannot be written or used: a missing or corrupt file, an index
// that contradicts the files, experts that do not fit the base model. It names the file so the user
// knows what to rebuild or delete.

#include <string>
#include <utility>

#include "ttmoe/core/error.hpp"

namespace ttmoe::ttmm {

/// An expert store problem; what() reads "<file>: <problem>".
class StoreError : public Error {
 public:
  StoreError(std::string file, std::string problem)
      : Error(file + ": " + problem), file_(std::move(file)), problem_(std::move(problem)) {}
  /// The file or folder of the store at fault.
  const std::string& file() const noexcept { return file_; }
  /// What is wrong with it.
  const std::string& problem() const noexcept { return problem_; }

 private:
  std::string file_, problem_;
};

}  // namespace ttmoe::ttmm
