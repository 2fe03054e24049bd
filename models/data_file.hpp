#pragma once
/// @file data_file.hpp
/// Opening the files a dataset is read from (data.path). A data file is
/// read whole, so only a regular file will do: a FIFO would block the run
/// in open() until a writer came, and a device would never end. Errors
/// name the path and the cause (a missing file, a loop of symbolic links,
/// a FIFO, an error while reading).

#include <string>

namespace gradwire::models {

/// What `path` is, when it is not a regular file that can be read: "" when
/// it is one. A folder counts as one only with `folder_ok`.
std::string not_a_data_file(const std::string& path, bool folder_ok = false);

/// Throws gradwire::error "`what`: `path` ..." unless it is a regular file.
void check_data_file(const std::string& path, const std::string& what);

/// The whole of the regular file `path` (opened without blocking).
std::string read_data_file(const std::string& path, const std::string& what);

} // namespace gradwire::models
