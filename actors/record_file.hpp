#pragma once
/// @file record_file.hpp
/// The file under each of gradwire's records (update_record.hpp,
/// mix_record.hpp): an 8-byte magic, a little-endian u32 length and a
/// header text, then entries appended as they happen. Entries reach the
/// file whole (one write each flush, no fsync: the kernel keeps them when
/// the process is killed); a bound in bytes ends the record at its last
/// whole entry, and a failed write (a full disk) ends it there too.

#include <cstdint>
#include <functional>
#include <string>

namespace gradwire::actors {

class record_file {
public:
  /// Creates `path` (its folder must exist) with `magic` (8 bytes) and
  /// `header`; `max_bytes` bounds the file (0: no bound).
  record_file(std::string path, const char* magic, const std::string& header, std::int64_t max_bytes);
  ~record_file();
  record_file(const record_file&) = delete;
  record_file& operator=(const record_file&) = delete;

  /// Whether entries are still taken (the file is open, not capped, no error).
  bool open() const { return fd_ >= 0 && !capped_ && error_.empty(); }
  /// Adds one encoded entry; false when the bound leaves it out (the
  /// record ends before it). `now` writes it and what is buffered at once.
  bool append(const std::string& entry, bool now);
  /// Writes what is buffered.
  void flush();
  std::int64_t bytes() const { return bytes_; }
  bool capped() const { return capped_; }
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

private:
  void fail(const std::string& why);

  std::string path_;
  int fd_ = -1;
  std::string buf_;
  std::int64_t bytes_ = 0, max_bytes_ = 0;
  bool capped_ = false;
  std::string error_;
};

/// A record's header text from its file's bytes: checks `magic` and the
/// length, naming `path` and `what` ("gradwire record") when they are
/// wrong; `body` is where the entries start.
std::string record_header_text(const std::string& data, const char* magic, const std::string& path,
                               const std::string& what, std::size_t& body);

/// Calls `f(key, value)` for each `key value` line of a header text (the
/// value is the rest of the line; a line without one is skipped).
void for_each_header_line(const std::string& text,
                          const std::function<void(const std::string&, const std::string&)>& f);
/// `value` as a whole decimal number (an optional '-'), into `v`.
bool header_integer(const std::string& value, std::int64_t& v);

} // namespace gradwire::actors
