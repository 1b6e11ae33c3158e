#pragma once
// Exceptions thrown by ttmoe. Every message names the operation and, for shape problems, both shapes,
// so that a user sees what to fix without a debugger.

#include <stdexcept>
#include <string>

namespace ttmoe {

/// Base class of every error ttmoe throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Operand shapes do not fit the operation (only detectable at run time: some extent is dynamic).
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// An argument is out of its valid range (axis, index, k, probability...).
class ValueError : public Error {
 public:
  using Error::Error;
};

/// Misuse of the autograd tape (backward of a non-scalar without a seed, a tape nesting error...).
class AutogradError : public Error {
 public:
  using Error::Error;
};

}  // namespace ttmoe
