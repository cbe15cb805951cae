# Run at every build (cmake -P): the identity of the binary being built —
# the commit, and whether the work tree differs from it — written to
# ${OUT} only when it changed, so an unchanged tree recompiles nothing.
#
#   -DSRC=<source dir> -DOUT=<header> -DTORCH=<LibTorch version> -DBUILD_TYPE=<type>
#
# A dirty tree is named by the SHA-256 of `git diff HEAD --binary` plus
# every untracked, non-ignored file (path and content hash): two builds of
# the same uncommitted change get the same identity, any other change a
# different one. Without git (a tarball) the commit is "unknown".
find_package(Git QUIET)
set(sha unknown)
set(diff_hash "")
if(GIT_FOUND)
  execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse HEAD WORKING_DIRECTORY "${SRC}"
    OUTPUT_VARIABLE head RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND head)
    set(sha "${head}")
    execute_process(COMMAND "${GIT_EXECUTABLE}" diff HEAD --binary WORKING_DIRECTORY "${SRC}"
      OUTPUT_VARIABLE diff ERROR_QUIET)
    execute_process(COMMAND "${GIT_EXECUTABLE}" ls-files --others --exclude-standard WORKING_DIRECTORY "${SRC}"
      OUTPUT_VARIABLE untracked ERROR_QUIET)
    string(REPLACE "\n" ";" untracked_list "${untracked}")
    set(untracked_hashes "")
    foreach(f IN LISTS untracked_list)
      if(f AND EXISTS "${SRC}/${f}" AND NOT IS_DIRECTORY "${SRC}/${f}")
        file(SHA256 "${SRC}/${f}" h)
        string(APPEND untracked_hashes "${f} ${h}\n")
      endif()
    endforeach()
    if(diff OR untracked_hashes)
      string(SHA256 full "${diff}\n--untracked--\n${untracked_hashes}")
      string(SUBSTRING "${full}" 0 12 diff_hash)
    endif()
  endif()
endif()
string(SHA256 id "ctitan-build-v1\n${sha}\n${diff_hash}\n${TORCH}\n${BUILD_TYPE}")
string(SUBSTRING "${id}" 0 16 id)
set(text "// Generated at build time by cmake/build_identity.cmake. Do not edit.
#pragma once
#define CTITAN_GIT_SHA_FULL \"${sha}\"
#define CTITAN_GIT_DIFF_HASH \"${diff_hash}\"
#define CTITAN_BUILD_ID \"${id}\"
")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
