#pragma once
/// @file stop_request.hpp
/// The process's stop request (Ctrl-C, SIGTERM: the command line's stop
/// flag), for the waits that no step boundary ends: the rendezvous, a job
/// barrier. Each looks at it between its polls and gives up at once with
/// an error saying what it was waiting for, so a stopped job never sits
/// out a timeout of minutes (a batch system's kill after its grace period).

#include "kernels/error.hpp"

#include <atomic>

namespace gradwire::kernels {

/// What such a wait throws when a stop ends it: an error that says what it
/// waited for, and that the command line exits with as a stop (130).
class stopped : public error {
public:
  using error::error;
};

/// From now on stop_requested() reads `*flag` (null: never a request).
void set_stop_request(const std::atomic<bool>* flag);

/// Whether a stop was asked for.
bool stop_requested();

} // namespace gradwire::kernels
