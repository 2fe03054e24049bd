// Rank, size and rendezvous from each launcher's environment.
#include "transport/launch_env.hpp"

#include "kernels/error.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

using gradwire::transport::detect_launch;
using gradwire::transport::first_host_of;

namespace {

/// Sets the given variables for one scope, after clearing every launcher variable.
struct scoped_env {
  static constexpr const char* all[] = {"GRADWIRE_RANK", "GRADWIRE_SIZE", "OMPI_COMM_WORLD_RANK",
                                        "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID",
                                        "SLURM_NTASKS", "GRADWIRE_RENDEZVOUS", "MASTER_ADDR", "MASTER_PORT",
                                        "GRADWIRE_TOKEN", "SLURM_STEP_NUM_NODES", "SLURM_NNODES",
                                        "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_JOB_ID",
                                        "SLURM_STEP_ID"};
  explicit scoped_env(std::initializer_list<std::pair<const char*, const char*>> vars) {
    clear();
    for (const auto& [k, v] : vars)
      ::setenv(k, v, 1);
  }
  ~scoped_env() { clear(); }
  static void clear() {
    for (const char* k : all)
      ::unsetenv(k);
  }
};

} // namespace

TEST_CASE("launch env: the first host of a SLURM node list") {
  CHECK(first_host_of("vm") == "vm");
  CHECK(first_host_of("node[01-04,07],gpu3") == "node01");
  CHECK(first_host_of("a,b") == "a");
  CHECK(first_host_of("rack1-n[7,9]") == "rack1-n7");
  CHECK_THROWS_AS(first_host_of("node[01-04"), gradwire::error);
  CHECK_THROWS_AS(first_host_of(",a"), gradwire::error);
}

TEST_CASE("launch env: srun on one node meets on loopback at a port of its own step") {
  scoped_env e{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_STEP_NUM_NODES", "1"},
               {"SLURM_STEP_NODELIST", "vm"}, {"SLURM_JOB_ID", "1234"}, {"SLURM_STEP_ID", "2"}};
  const auto li = detect_launch();
  CHECK(li.rank == 1);
  CHECK(li.size == 4);
  CHECK(li.source == "SLURM_PROCID/SLURM_NTASKS");
  CHECK(li.rendezvous.host == "127.0.0.1");
  CHECK(li.rendezvous.port == 29500 + (1234 * 16 + 2) % 20000);
  // Another step of the same job has another port.
  ::setenv("SLURM_STEP_ID", "3", 1);
  CHECK(detect_launch().rendezvous.port != li.rendezvous.port);
}

TEST_CASE("launch env: srun across nodes meets at the first node unless told otherwise") {
  scoped_env e{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_STEP_NUM_NODES", "2"},
               {"SLURM_STEP_NODELIST", "gpu[12-13]"}, {"SLURM_JOB_ID", "77"}};
  auto li = detect_launch();
  CHECK(li.rendezvous.host == "gpu12");
  CHECK(li.rendezvous.port == 29500 + 77 * 16 % 20000);
  ::setenv("MASTER_ADDR", "10.0.0.5", 1);
  ::setenv("MASTER_PORT", "31000", 1);
  li = detect_launch();
  CHECK(li.rendezvous.host == "10.0.0.5");
  CHECK(li.rendezvous.port == 31000);
  ::setenv("GRADWIRE_RENDEZVOUS", "10.0.0.6:32000", 1);
  li = detect_launch();
  CHECK(li.rendezvous.host == "10.0.0.6");
  CHECK(li.rendezvous.port == 32000);
}

TEST_CASE("launch env: mpirun and bad variables") {
  {
    scoped_env e{{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}};
    const auto li = detect_launch();
    CHECK(li.rank == 2);
    CHECK(li.size == 3);
    CHECK(li.rendezvous.host == "127.0.0.1");
    CHECK(li.rendezvous.port == 29500);
  }

  {
    scoped_env e{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "3"}};
    CHECK_THROWS_AS(detect_launch(), gradwire::error);
  }
  {
    scoped_env e{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "12x"}};
    CHECK_THROWS_AS(detect_launch(), gradwire::error);
  }
  {
    scoped_env e{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NUM_NODES", "3"}};
    CHECK_THROWS_AS(detect_launch(), gradwire::error); // across nodes, no node list
  }
  // A number too large is said to be out of range, not "not a number".
  {
    scoped_env e{{"GRADWIRE_RANK", "0"}, {"GRADWIRE_SIZE", "99999999"}};
    CHECK_THROWS_WITH(detect_launch(), Catch::Contains("GRADWIRE_SIZE='99999999' is out of range [0, 16777215]"));
  }
  {
    scoped_env e{{"GRADWIRE_RANK", "0"}, {"GRADWIRE_SIZE", "2x"}};
    CHECK_THROWS_WITH(detect_launch(), Catch::Contains("GRADWIRE_SIZE='2x' is not a valid number"));
  }
}

TEST_CASE("host numbers: each rank's host numbered in the order of the host's lowest rank") {
  using gradwire::transport::host_numbers;
  CHECK(host_numbers({"a", "a", "b", "b"}) == std::vector<int>{0, 0, 1, 1});
  CHECK(host_numbers({"b", "a", "b", "a"}) == std::vector<int>{0, 1, 0, 1}); // srun's cyclic placement
  CHECK(host_numbers({"x", "x", "x", "y"}) == std::vector<int>{0, 0, 0, 1}); // hosts of 3 ranks and 1
  CHECK(host_numbers({"a"}) == std::vector<int>{0});
  CHECK(host_numbers({}).empty());
}
