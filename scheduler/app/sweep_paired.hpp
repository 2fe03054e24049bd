#pragma once
/// @file sweep_paired.hpp
/// A paired sweep's comparison ([sweep] paired = true): each variant after
/// the first against the first, over the seeds, two ways.
/// - Unpaired: the variant's own real runs against the first's. The
///   difference carries the algorithm's effect and the two runs' timing.
/// - Paired: the variant replayed on the first variant's record (the same
///   arrival order and staleness of every update) against that run. Only
///   the algorithm differs.
/// The spread of each difference over the seeds says how much of the
/// unpaired comparison was timing noise.

#include "scheduler/app/sweep_table.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace gradwire::scheduler {

/// A replay of point `base`'s run with point `real`'s variant (indices
/// into the sweep's points) and its summary.json.
struct paired_point {
  std::size_t base = 0, real = 0;
  nlohmann::json summary;
};

struct paired_table {
  std::string md;
  nlohmann::json rows = nlohmann::json::array();
};

/// The comparison as a table (sweep.md, report.html): its columns, its
/// cells from paired_table::rows, and what the columns mean.
const std::vector<std::string>& paired_columns();
std::vector<std::vector<std::string>> paired_cells(const nlohmann::json& rows);
extern const char* const paired_note;

/// `variant_axis`: the index of the variants among `axes`.
paired_table make_paired_table(const std::vector<sweep_point>& done, const std::vector<paired_point>& paired,
                               const std::vector<sweep_axis>& axes, std::size_t variant_axis);

} // namespace gradwire::scheduler
