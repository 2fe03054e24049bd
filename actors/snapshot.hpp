#pragma once
/// @file snapshot.hpp
/// One actor's part of a checkpoint: what an exact continuation of that
/// actor needs, as named sections of floats (parameters, BatchNorm
/// statistics, optimizer moments) and of int64s (step, data position,
/// clocks, counters). A worker snapshots itself after a step, a shard
/// after a version, each at its own boundary, so no actor waits for a
/// checkpoint: the parts of step K are consistent because each was taken
/// at K.
///
/// On the wire (and in a checkpoint file) a snapshot is `meta`, a short
/// text naming its sections, plus one float buffer holding every float
/// section back to back: (snapshot_atom, meta, floats) with the floats as
/// the message's data frame. from_parts() trusts neither: every count,
/// name and length is checked.

#include "actors/messages.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gradwire::actors {

/// Worker or shard -> coordinator: (snapshot_atom, meta, floats).
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;

struct snapshot {
  std::string who;        ///< "worker 3", "shard 1": its file and its place
  std::int64_t step = 0;  ///< the checkpoint it belongs to (steps per worker)
  std::vector<std::pair<std::string, std::vector<float>>> floats;
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> ints;
  /// Each float section's name and length (filled by from_parts and layout).
  std::vector<std::pair<std::string, std::size_t>> float_sizes;

  void put(std::string name, std::vector<float> v) { floats.emplace_back(std::move(name), std::move(v)); }
  void put(std::string name, std::vector<std::int64_t> v) { ints.emplace_back(std::move(name), std::move(v)); }
  void put(std::string name, std::int64_t v) { put(std::move(name), std::vector<std::int64_t>{v}); }
  /// The section `name`; throws gradwire::error naming the snapshot when absent.
  const std::vector<float>& f(const std::string& name) const;
  const std::vector<std::int64_t>& i(const std::string& name) const;
  /// The single value of int section `name`.
  std::int64_t one(const std::string& name) const;
  bool has(const std::string& name) const;

  /// The text that names the sections (and holds the ints).
  std::string meta() const;
  /// Every float section, back to back, in meta()'s order.
  std::vector<float> packed() const;
  /// A snapshot from meta() and packed(); throws gradwire::error saying
  /// what is wrong (`where` names the source: a file, a rank).
  static snapshot from_parts(const std::string& meta, const float* data, std::size_t n, const std::string& where);
  /// Checks `meta` against `n` stored floats as from_parts does, without
  /// copying them: the result's float sections are empty.
  static snapshot layout(const std::string& meta, std::size_t n, const std::string& where);
  /// meta() for float sections of these names and sizes.
  std::string meta_for(const std::vector<std::pair<std::string, std::size_t>>& float_sizes) const;
};

/// A snapshot as it travels and is written: its meta text and one buffer
/// of its floats, kept as they came (no unpacking on the way to disk).
struct snapshot_frame {
  std::string who;
  std::int64_t step = 0;
  std::string meta;
  slice floats; ///< undefined when it has none
  /// Checks a frame that arrived (snapshot::layout) and names it.
  static snapshot_frame checked(std::string meta, slice floats, const std::string& where);
  /// A frame of `s` (packs its floats).
  static snapshot_frame of(const snapshot& s);
  /// The snapshot itself (copies the floats out).
  snapshot unpack(const std::string& where) const;
  std::size_t float_count() const { return floats.defined() ? static_cast<std::size_t>(floats.numel()) : 0; }
};

} // namespace gradwire::actors
