// gradwire: the command-line entry point (the command line itself: cli.cpp).
#include "scheduler/app/cli.hpp"

int main(int argc, char** argv) { return gradwire::scheduler::cli_main(argc, argv); }
