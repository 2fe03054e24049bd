#pragma once
/// @file cli.hpp
/// The `gradwire` command line as a function: the program's main() calls it,
/// and so does the Python module (python/), with the same arguments and
/// the same exit statuses: 0 done, 2 a usage or config error, 130 stopped
/// by Ctrl-C (results and a checkpoint kept), 1 an internal error.

#include <string>

namespace gradwire::scheduler {

/// What a caller that embeds the command line gets back besides the status.
struct cli_embedding {
  std::string error; ///< the message of a usage or config error (also logged), or ""
};

/// Runs the command line `argv` (argv[0] is the program's name). With
/// `embed`, the caller's SIGINT and SIGTERM handlers and signal mask are put
/// back afterwards, and a run that leaves its actors behind returns instead
/// of ending the process.
int cli_main(int argc, char** argv, cli_embedding* embed = nullptr);

} // namespace gradwire::scheduler
