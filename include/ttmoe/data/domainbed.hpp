#pragma once
// Multi-domain image folders in DomainBed's layout, ROOT/<dataset>/<domain>/<class>/<image>, scanned
// exactly as DomainBed's MultipleEnvironmentImageFolder does with torchvision's ImageFolder: domains are
// the sorted sub-folders of the dataset folder, each domain's classes its sorted sub-folders, and a
// domain's files are, class by class, the sorted files of every folder below the class folder (os.walk,
// sorted) whose extension ImageFolder accepts. Keeping that order exactly matters: the in/out split
// (domainbed_split.hpp) indexes this list, so any other order would hold out different images.
//
// Where ImageFolder would silently mislabel, this scanner stops: a class folder missing from one domain
// would shift every later label of that domain (ImageFolder labels each domain on its own), so it is an
// error naming the domain and the class. Images are not decoded here; an unreadable one is an ImageError
// naming the file when the loader reaches it (see domainbed_loader.hpp for why that is the policy).

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "ttmoe/data/datasets.hpp"

namespace ttmoe::data {

/// Which rule of the DomainBed layout a folder broke (tests and callers branch on it).
enum class DomainBedErrorKind {
  MissingFolder,    ///< the dataset folder (or a known dataset's domain folder) does not exist
  EmptyDomain,      ///< a domain with no class folders, or a class folder with no image files
  ClassMismatch,    ///< the domains do not all have the same class folders
  TestEnvRange,     ///< a test environment index outside [0, number of domains)
};

/// A DomainBed-layout folder that cannot be used as it is; the message names the folder, domain or class.
class DomainBedError : public DatasetError {
 public:
  /// An error of `kind` with the full message.
  DomainBedError(DomainBedErrorKind kind, const std::string& message) : DatasetError(message), kind_(kind) {}
  /// The rule that was broken.
  DomainBedErrorKind kind() const noexcept { return kind_; }

 private:
  DomainBedErrorKind kind_;
};

/// A dataset DomainBed knows: the class name its scripts use, the folder under ROOT and its domains.
struct KnownDomainBedDataset {
  std::string name;                  ///< "PACS", "OfficeHome", ... (DomainBed's dataset class)
  std::string folder;                ///< folder under the data root ("office_home", ...)
  std::vector<std::string> domains;  ///< sorted, i.e. the environment order
  int num_classes = 0;
};

/// The five DomainBed datasets GMoE reports on, with DomainBed's folder and domain names.
inline const std::vector<KnownDomainBedDataset>& known_domainbed_datasets() {
  static const std::vector<KnownDomainBedDataset> sets{
      {"PACS", "PACS", {"art_painting", "cartoon", "photo", "sketch"}, 7},
      {"VLCS", "VLCS", {"Caltech101", "LabelMe", "SUN09", "VOC2007"}, 5},
      {"OfficeHome", "office_home", {"Art", "Clipart", "Product", "Real World"}, 65},
      {"TerraIncognita", "terra_incognita", {"location_100", "location_38", "location_43", "location_46"}, 10},
      {"DomainNet", "domain_net", {"clipart", "infograph", "painting", "quickdraw", "real", "sketch"}, 345},
  };
  return sets;
}

/// The known dataset called `name` (its class name or its folder name), or nullptr.
inline const KnownDomainBedDataset* find_known_domainbed_dataset(const std::string& name) {
  for (const auto& d : known_domainbed_datasets())
    if (d.name == name || d.folder == name) return &d;
  return nullptr;
}

/// Whether torchvision's ImageFolder accepts `p` (IMG_EXTENSIONS, any case). Broader than what stb
/// decodes (.tif, .webp): such files stay in the list so indices match DomainBed's, and fail by name.
inline bool is_imagefolder_file(const std::filesystem::path& p) {
  return has_extension(p, {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"});
}

/// The image files under a class folder in ImageFolder's order: folders (the class folder and every
/// folder below it, links followed) sorted by path, each folder's files sorted by name.
inline std::vector<std::filesystem::path> imagefolder_class_files(const std::filesystem::path& class_dir) {
  std::vector<std::pair<std::string, std::vector<std::string>>> dirs;  // (folder path, its image file names)
  std::vector<std::filesystem::path> pending{class_dir};
  while (!pending.empty()) {
    const auto dir = pending.back();
    pending.pop_back();
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.is_directory()) pending.push_back(e.path());
      else if (e.is_regular_file() && is_imagefolder_file(e.path())) names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    dirs.emplace_back(dir.string(), std::move(names));
  }
  std::sort(dirs.begin(), dirs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::filesystem::path> out;
  for (const auto& [dir, names] : dirs)
    for (const auto& n : names) out.push_back(std::filesystem::path(dir) / n);
  return out;
}

/// One domain (DomainBed "environment"): its folder name and labelled files in ImageFolder order.
struct DomainBedEnvironment {
  std::string name;
  std::vector<LabeledFile> files;
};

/// A scanned DomainBed dataset: environments in sorted order and the class names shared by all of them.
struct DomainBedDataset {
  std::string name;                               ///< dataset folder name
  std::filesystem::path root;                     ///< ROOT/<dataset>
  std::vector<std::string> classes;               ///< sorted; label = position
  std::vector<DomainBedEnvironment> environments; ///< sorted by folder name
  /// The environment names in order.
  std::vector<std::string> domain_names() const {
    std::vector<std::string> n;
    for (const auto& e : environments) n.push_back(e.name);
    return n;
  }
};

/// Scans `data_root`/<folder>, where `dataset` is a known DomainBed name ("PACS", "OfficeHome", ... or
/// its folder name "office_home") or any folder name in the same layout. For a known dataset every one
/// of its domains must be there, with DomainBed's number of classes. Errors (DomainBedError) name the
/// folder, domain and class at fault.
inline DomainBedDataset scan_domainbed(const std::filesystem::path& data_root, const std::string& dataset) {
  const KnownDomainBedDataset* known = find_known_domainbed_dataset(dataset);
  DomainBedDataset ds;
  ds.name = known ? known->folder : dataset;
  ds.root = data_root / ds.name;
  std::error_code ec;
  if (!std::filesystem::is_directory(ds.root, ec))
    throw DomainBedError(DomainBedErrorKind::MissingFolder,
                         "DomainBed dataset '" + dataset + "': folder " + ds.root.string() +
                             " does not exist (expected layout ROOT/<dataset>/<domain>/<class>/<image>)");
  std::vector<std::string> domains;
  for (const auto& e : std::filesystem::directory_iterator(ds.root)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && !n.empty() && n[0] != '.') domains.push_back(n);
  }
  std::sort(domains.begin(), domains.end());
  if (known)
    for (const auto& d : known->domains)
      if (!std::binary_search(domains.begin(), domains.end(), d))
        throw DomainBedError(DomainBedErrorKind::MissingFolder,
                             "DomainBed dataset '" + known->name + "': domain folder '" + d + "' is missing from " +
                                 ds.root.string());
  if (domains.empty())
    throw DomainBedError(DomainBedErrorKind::EmptyDomain, "DomainBed dataset: " + ds.root.string() + " has no domain folders");

  for (const auto& d : domains) {
    const auto ddir = ds.root / d;
    std::vector<std::string> classes;
    for (const auto& e : std::filesystem::directory_iterator(ddir)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory() && !n.empty() && n[0] != '.') classes.push_back(n);
    }
    std::sort(classes.begin(), classes.end());
    if (classes.empty())
      throw DomainBedError(DomainBedErrorKind::EmptyDomain, "DomainBed domain '" + d + "' (" + ddir.string() + ") has no class folders");
    if (ds.classes.empty()) {
      ds.classes = classes;
    } else if (classes != ds.classes) {
      // Name the first difference: a class one domain has and the other lacks.
      std::string msg = "DomainBed domains '" + ds.environments.front().name + "' and '" + d + "' have different classes:";
      for (const auto& c : ds.classes)
        if (!std::binary_search(classes.begin(), classes.end(), c)) msg += " '" + c + "' missing from '" + d + "';";
      for (const auto& c : classes)
        if (!std::binary_search(ds.classes.begin(), ds.classes.end(), c))
          msg += " '" + c + "' missing from '" + ds.environments.front().name + "';";
      throw DomainBedError(DomainBedErrorKind::ClassMismatch, msg + " every domain needs the same class folders, or labels shift");
    }
    DomainBedEnvironment env{d, {}};
    for (std::size_t k = 0; k < classes.size(); ++k) {
      auto files = imagefolder_class_files(ddir / classes[k]);
      if (files.empty())
        throw DomainBedError(DomainBedErrorKind::EmptyDomain, "DomainBed domain '" + d + "': class folder '" + classes[k] +
                                                                  "' (" + (ddir / classes[k]).string() + ") has no image files");
      for (auto& f : files) env.files.push_back({std::move(f), std::int64_t(k)});
    }
    ds.environments.push_back(std::move(env));
  }
  // A class missing from every domain passes the per-domain comparison; for a known dataset the count
  // still gives it away (and a model head sized from it would not match the published numbers).
  if (known && ds.classes.size() != std::size_t(known->num_classes))
    throw DomainBedError(DomainBedErrorKind::ClassMismatch,
                         "DomainBed dataset '" + known->name + "' has " + std::to_string(known->num_classes) +
                             " classes, but " + ds.root.string() + " has " + std::to_string(ds.classes.size()) +
                             " class folders per domain");
  return ds;
}

/// Throws DomainBedError (TestEnvRange) unless 0 <= test_env < num_environments; `what` names the option.
inline void check_test_env(std::int64_t test_env, std::size_t num_environments, const std::string& what = "--test-env") {
  if (test_env < 0 || std::size_t(test_env) >= num_environments)
    throw DomainBedError(DomainBedErrorKind::TestEnvRange,
                         what + " " + std::to_string(test_env) + " is out of range: the dataset has " +
                             std::to_string(num_environments) + " domains (0.." + std::to_string(num_environments - 1) + ")");
}

/// The training environments for a held-out `test_env`: every other index, in order.
inline std::vector<std::size_t> training_environments(std::int64_t test_env, std::size_t num_environments) {
  check_test_env(test_env, num_environments);
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < num_environments; ++i)
    if (i != std::size_t(test_env)) out.push_back(i);
  return out;
}

}  // namespace ttmoe::data
