#pragma once
// ImageNet-style data sets on disk: class folders named by WordNet id (wnid), the 1000-class index
// order, and the ImageNet-C layout DIR/<corruption>/<severity>/<wnid>/*.JPEG.
//
// Label indices. torchvision's ImageFolder sorts the folder names, and over the 1000 ImageNet wnids
// that sorted order IS the standard class-index order, so a full ImageNet folder maps by "sorted
// folder names". ImageNet-R and ImageNet-A have only 200 of those folders: their labels are the
// folders' positions in the 1000-class list, which therefore has to come from somewhere else (a
// classes file, or the folder names of a full 1000-class data set such as the validation set or an
// ImageNet-C corruption). imagenet_class_list() resolves that and fails clearly when it cannot.
// Nothing here decodes images (datasets_transform.hpp does), so scanning needs no stb.

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ttmoe::data {

/// A data set folder that is missing or malformed; the message names the folder and what to do.
class DatasetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One labelled image file.
struct LabeledFile {
  std::filesystem::path path;
  std::int64_t label = -1;
};

/// A scanned class-folder data set: the class folder names (in label order when no external class
/// list was used) and every image file with its label, in (class, file name) order.
struct ClassFolderDataset {
  std::vector<std::string> classes;  ///< folder names found, sorted
  std::vector<LabeledFile> files;
};

/// Whether the extension of `p`, lower-cased, is one of `extensions` (given lower-case, with the dot).
inline bool has_extension(const std::filesystem::path& p, std::initializer_list<std::string_view> extensions) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return std::find(extensions.begin(), extensions.end(), ext) != extensions.end();
}

/// Whether `p` has an image extension stb decodes (.jpeg/.jpg/.png/.bmp, any case).
inline bool is_image_file(const std::filesystem::path& p) { return has_extension(p, {".jpeg", ".jpg", ".png", ".bmp"}); }

/// Throws DatasetError unless `dir` is an existing directory; `what` names the option or role
/// ("--imagenet-r") so the user knows which argument was wrong.
inline void require_directory(const std::filesystem::path& dir, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec))
    throw DatasetError(what + ": folder " + dir.string() + " does not exist");
  if (!std::filesystem::is_directory(dir, ec)) throw DatasetError(what + ": " + dir.string() + " is not a folder");
}

/// Sorted names of the sub-folders of `dir` (hidden ones skipped). Sorting is what makes the
/// labels reproducible: directory iteration order is file-system dependent.
inline std::vector<std::string> list_class_folders(const std::filesystem::path& dir, const std::string& what = "data set") {
  require_directory(dir, what);
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && !name.empty() && name[0] != '.') out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  if (out.empty()) throw DatasetError(what + ": " + dir.string() + " has no class folders");
  return out;
}

/// Reads a class list: one wnid per line (blank lines and '#' comments ignored; anything after the
/// first whitespace ignored, so "n01440764 tench" lines work). Rejects duplicates.
inline std::vector<std::string> read_class_list(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw DatasetError("--imagenet-classes: cannot open " + file.string());
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    const auto b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    const auto e = line.find_first_of(" \t\r,", b);
    out.push_back(line.substr(b, e == std::string::npos ? std::string::npos : e - b));
  }
  std::vector<std::string> sorted = out;
  std::sort(sorted.begin(), sorted.end());
  if (auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end())
    throw DatasetError(file.string() + ": class '" + *d + "' is listed twice");
  if (out.empty()) throw DatasetError(file.string() + ": no classes listed");
  return out;
}

/// Class name -> index in `classes`.
inline std::map<std::string, std::int64_t> class_index(const std::vector<std::string>& classes) {
  std::map<std::string, std::int64_t> m;
  for (std::size_t i = 0; i < classes.size(); ++i) m.emplace(classes[i], std::int64_t(i));
  return m;
}

/// Scans `dir`/<class>/<image files>. Labels: with `index_classes` empty, a folder's position among
/// the sorted folders (ImageFolder); otherwise its position in `index_classes` (the 1000-class list
/// for ImageNet-R/-A), and a folder absent from that list is an error. Files are sorted by name.
inline ClassFolderDataset scan_class_folders(const std::filesystem::path& dir,
                                             const std::vector<std::string>& index_classes = {},
                                             const std::string& what = "data set") {
  ClassFolderDataset ds;
  ds.classes = list_class_folders(dir, what);
  const auto index = class_index(index_classes);
  for (std::size_t k = 0; k < ds.classes.size(); ++k) {
    std::int64_t label = std::int64_t(k);
    if (!index_classes.empty()) {
      auto it = index.find(ds.classes[k]);
      if (it == index.end())
        throw DatasetError(what + ": class folder '" + ds.classes[k] + "' of " + dir.string() +
                           " is not in the " + std::to_string(index_classes.size()) + "-class list");
      label = it->second;
    }
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir / ds.classes[k]))
      if (e.is_regular_file() && is_image_file(e.path())) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (auto& f : files) ds.files.push_back({std::move(f), label});
  }
  if (ds.files.empty()) throw DatasetError(what + ": no image files under " + dir.string());
  return ds;
}

/// Where the 1000-class ImageNet wnid list comes from, in priority order: an explicit classes file,
/// the class folders of a full 1000-class folder (ImageNet val, or one corruption/severity of
/// ImageNet-C). Each candidate folder is used only if it really has 1000 class folders.
struct ClassListSources {
  std::optional<std::filesystem::path> classes_file;    ///< --imagenet-classes
  std::vector<std::filesystem::path> full_class_dirs;  ///< folders whose sub-folders are the 1000 wnids
};

/// The 1000 wnids in index order (sorted), or a DatasetError explaining how to supply them.
inline std::vector<std::string> imagenet_class_list(const ClassListSources& src) {
  if (src.classes_file) {
    auto c = read_class_list(*src.classes_file);
    if (c.size() != 1000)
      throw DatasetError(src.classes_file->string() + ": expected 1000 ImageNet wnids, found " + std::to_string(c.size()));
    return c;
  }
  for (const auto& d : src.full_class_dirs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(d, ec)) continue;
    auto c = list_class_folders(d);
    if (c.size() == 1000) return c;  // sorted wnids == the standard index order
  }
  throw DatasetError(
      "ImageNet-R / ImageNet-A labels need the 1000-class wnid list, to map their 200 class folders onto the "
      "1000 ImageNet indices. Give --imagenet-classes FILE (one wnid per line, in index order) or "
      "--imagenet-val DIR / --imagenet-c DIR with all 1000 class folders.");
}

/// The ImageNet-C folder of one corruption and severity: DIR/<corruption>/<severity>.
inline std::filesystem::path imagenet_c_folder(const std::filesystem::path& dir, const std::string& corruption,
                                               int severity) {
  return dir / corruption / std::to_string(severity);
}

/// Which of `wanted` corruptions exist at `severity` under the ImageNet-C root `dir`. Throws a
/// DatasetError listing every missing one (a silently shorter stream would change the benchmark).
inline std::vector<std::string> discover_imagenet_c(const std::filesystem::path& dir, int severity,
                                                    const std::vector<std::string>& wanted) {
  require_directory(dir, "--imagenet-c");
  std::vector<std::string> missing, found;
  for (const auto& c : wanted) {
    std::error_code ec;
    if (std::filesystem::is_directory(imagenet_c_folder(dir, c, severity), ec)) found.push_back(c);
    else missing.push_back(c + "/" + std::to_string(severity));
  }
  if (!missing.empty()) {
    std::string m = "--imagenet-c: " + dir.string() + " lacks " + std::to_string(missing.size()) + " corruption folder(s):";
    for (const auto& s : missing) m += " " + s;
    throw DatasetError(m + " (expected layout DIR/<corruption>/<severity>/<wnid>/*.JPEG)");
  }
  return found;
}

}  // namespace ttmoe::data
