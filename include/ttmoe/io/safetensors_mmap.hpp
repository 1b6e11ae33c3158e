// Read-only memory mapping of a whole file (POSIX), owned RAII-style.
//
// Checkpoints can be gigabytes; mapping lets the reader validate the header and copy out only
// the tensors asked for, with the kernel paging data in on demand instead of one big read.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <utility>

#include "ttmoe/io/safetensors_error.hpp"

namespace ttmoe::io::detail {

/// A read-only private mapping of an entire regular file. Movable, not copyable; unmaps on
/// destruction. An empty file has no mapping (mmap rejects length 0) and an empty bytes() span.
/// If another process truncates the file while it is mapped, touching the lost pages raises
/// SIGBUS; that is inherent to mmap and the reason callers should not rewrite files in place
/// (SafetensorsWriter replaces them atomically instead).
class MappedFile {
 public:
  MappedFile() = default;

  /// Maps `path`; throws SafetensorsError{Io} naming the path and the OS reason on failure.
  explicit MappedFile(const std::filesystem::path& path) {
    const std::string label = path.string();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw_errno(label, "cannot open for reading");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      throw_errno(label, "cannot stat");
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw SafetensorsError(ErrorKind::Io, label, "not a regular file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        errno = err;
        size_ = 0;
        throw_errno(label, "cannot mmap");
      }
      data_ = static_cast<const std::byte*>(p);
    }
    ::close(fd);  // the mapping keeps the file alive; the descriptor is no longer needed
  }

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  MappedFile& operator=(MappedFile&& other) noexcept {
    if (this != &other) {
      unmap();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~MappedFile() { unmap(); }

  /// The mapped bytes; valid until this object is destroyed or assigned (moves keep the address).
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }

 private:
  [[noreturn]] static void throw_errno(const std::string& label, const char* what) {
    throw SafetensorsError(ErrorKind::Io, label, std::string(what) + ": " + std::strerror(errno));
  }
  void unmap() noexcept {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }

  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Maps the pages holding `bytes` (part of a MappedFile) into the page table now, reading them from
/// the file where they are not cached yet (Linux 5.14's MADV_POPULATE_READ; MADV_WILLNEED, a read-
/// ahead without the mapping, elsewhere). Why: the first pass over a mapped weight otherwise takes
/// one page fault per 64 KiB (the kernel's fault-around), and a model's first forward pays them all:
/// for a 2.5 GB BF16 LLM's prefill that was ~6% of it (docs/design.md). A hint only: failure changes
/// nothing but speed, so errors are ignored.
inline void prefault_read(std::span<const std::byte> bytes) noexcept {
  if (bytes.empty()) return;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<std::uintptr_t>(bytes.data()) / page * page;
  const auto end = reinterpret_cast<std::uintptr_t>(bytes.data()) + bytes.size();
#if defined(MADV_POPULATE_READ)
  if (::madvise(reinterpret_cast<void*>(first), end - first, MADV_POPULATE_READ) == 0) return;
#endif
  ::madvise(reinterpret_cast<void*>(first), end - first, MADV_WILLNEED);
}

/// Asks for the pages holding `bytes` (part of a MappedFile) in 2 MiB units (MADV_HUGEPAGE on a
/// file mapping). Why: a batch-1 decode streams every weight once per token, and over a 2.5 GB
/// checkpoint in 4 KiB pages a plain read got 53 GB/s where the same bytes in huge pages got 66 in
/// the VM's fast minutes, and the same physical pages read 1.2-1.3x and the GEMVs ran 1.3-1.4x faster
/// through 2 MiB entries than through 4 KiB ones under load (docs/design.md, #14 decode, helper
/// decode18). What the advice changes is how pages read from disk are cached: on Linux 6.x with a
/// filesystem that has large folios (ext4, xfs) they come in as 2 MiB folios, which the kernel maps
/// with 2 MiB entries (in any mapping of the file). So it must come before the first touch
/// (prefault_read); pages already cached in small folios stay 4 KiB. A hint only: errors (no THP,
/// another OS) change nothing but speed and are ignored. Call it on whole mappings (one call per
/// file): the kernel then keeps one mapping area instead of splitting it at each advised range.
inline void advise_huge_pages(std::span<const std::byte> bytes) noexcept {
#if defined(MADV_HUGEPAGE)
  if (bytes.empty()) return;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<std::uintptr_t>(bytes.data()) / page * page;
  const auto end = reinterpret_cast<std::uintptr_t>(bytes.data()) + bytes.size();
  ::madvise(reinterpret_cast<void*>(first), end - first, MADV_HUGEPAGE);
#else
  (void)bytes;
#endif
}

/// Drops the pages holding `bytes` (part of a read-only MappedFile) from this process's resident set
/// (MADV_DONTNEED); the page cache keeps them, and a later read maps them in again, unchanged: the
/// mapping is read-only and private, so no page of it was ever written. Pages `bytes` shares with its
/// neighbours at either end go too. Used after a mapped tensor has been copied elsewhere, so the copy
/// and the mapped bytes are not resident together. A hint only: failure changes nothing but the
/// resident set, so errors are ignored.
inline void release_pages(std::span<const std::byte> bytes) noexcept {
  if (bytes.empty()) return;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<std::uintptr_t>(bytes.data()) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(bytes.data()) + bytes.size() + page - 1) / page * page;
  ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
}

}  // namespace ttmoe::io::detail
