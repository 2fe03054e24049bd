# Run at build time (cmake -P): writes OUT, a C++ file defining
# gradwire::scheduler::git_commit_of_build(), with the commit SRC is checked
# out at ("-dirty" when tracked files differ from it; "unknown" outside git).
# The file is rewritten only when the text changes, so an unchanged commit
# recompiles nothing.
set(commit "unknown")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS "${SRC}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SRC}" rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0 AND head)
    set(commit "${head}")
    execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SRC}" diff --quiet HEAD -- RESULT_VARIABLE dirty ERROR_QUIET)
    if(NOT dirty EQUAL 0)
      string(APPEND commit "-dirty")
    endif()
  endif()
endif()
set(text "// Written by cmake/GitCommit.cmake at build time.\nnamespace gradwire::scheduler {\nconst char* git_commit_of_build() { return \"${commit}\"; }\n}\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
