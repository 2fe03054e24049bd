#pragma once
/// @file tensorboard.hpp
/// TensorBoard event files from metrics.jsonl's records, written as a run
/// goes (experiment.tensorboard = true) or afterwards (`gradwire export
/// --tensorboard`). In the run's tb/ folder:
/// - tb/ itself: eval/test_accuracy and eval/test_loss at each evaluation,
///   train/lr (the schedule's) at worker 0's records;
/// - tb/worker-N: worker N's windows: train/loss, train/accuracy (one
///   worker), staleness/mean, staleness/p99, train/samples_per_sec,
///   time/compute_ms, time/comm_ms, time/wait_ms, and bytes/sent_mb,
///   bytes/received_mb where the run counts them.
/// TensorBoard draws the workers as runs side by side. Each file is the
/// TFRecord framing of tensorflow.Event messages (tensorboard_event.proto):
/// length, masked CRC-32C of the length, the record, its masked CRC-32C.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace gradwire::scheduler {

/// CRC-32C (Castagnoli) of `n` bytes, as TFRecord uses it.
std::uint32_t crc32c(const void* data, std::size_t n);
/// TFRecord's masked form of a CRC: rotated right by 15, plus 0xa282ead8.
std::uint32_t masked_crc32c(const void* data, std::size_t n);

class tensorboard_writer {
public:
  /// Writes into `dir` (created); `wall_start`: the run's start, seconds
  /// since the epoch (record times are seconds since then).
  tensorboard_writer(std::string dir, double wall_start);
  /// The scalars of one metrics.jsonl record (other record types: none).
  void add(const nlohmann::json& record);
  void flush();

private:
  struct last_window {
    double time = 0;
    std::int64_t samples = 0;
  };
  std::ofstream& run(const std::string& name);
  void write_scalars(const std::string& run_name, std::int64_t step, double wall,
                     const std::vector<std::pair<std::string, double>>& scalars);
  void add_step(const nlohmann::json& r);
  std::string dir_;
  double wall_start_;
  std::map<std::string, std::ofstream> runs_;
  std::map<int, last_window> last_;
};

/// `gradwire export --tensorboard DIR`: DIR/tb from DIR/metrics.jsonl for a
/// run, or for each point of a sweep (DIR/point-NNN/tb). Returns the tb
/// folders written; throws gradwire::error for a folder that is neither.
std::vector<std::string> export_tensorboard(const std::string& dir);

} // namespace gradwire::scheduler
