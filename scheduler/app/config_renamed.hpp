#pragma once
/// @file config_renamed.hpp
/// Keys that moved into their family's own subtable (internal to
/// scheduler/app): DiLoCo's outer step in [topology.diloco], Streaming
/// DiLoCo's fragments in [topology.streaming], the parameter server's keys
/// in [topology.ps], gossip's and the ring's in theirs, compression's in
/// [compression]. The flat names (topology.outer_lr, transport.compress,
/// ...) are read for one more release, with a warning
/// that names the new key; a key given both ways is an error naming both
/// places.

#include <toml++/toml.h>

#include <string>
#include <vector>

namespace gradwire::scheduler {

struct renamed_key {
  const char* old_key; ///< the flat name, "topology.outer_lr"
  const char* new_key; ///< its family's, "topology.diloco.outer_lr"
};

const std::vector<renamed_key>& renamed_keys();

/// The name `key` has now: the new key, with a warning citing `where`
/// (none when `where` is empty), for a renamed one; `key` itself otherwise.
std::string current_key(const std::string& key, const std::string& where);

/// Moves every renamed key of `root` (read from `source`) to its new
/// place, warning once for each with its file and line.
void move_renamed_keys(toml::table& root, const std::string& source);

} // namespace gradwire::scheduler
